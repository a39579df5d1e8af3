"""The rounds loop: observe → decide → execute (train) → aggregate → evaluate → emit → checkpoint.

``Runner`` is what the CLI, the local service runner and the Celery task all call. Each finished
round is sent to the sink and then checkpointed, so a crash loses no reported round; a round that
was reported but not checkpointed is re-run on resume and re-reported with identical content (every
random draw is derived from the seed and the round index), which the service's unique keys absorb.

The runner keeps the running averages behind the gradient noise scale
(:class:`~collapipe_core.gradient_noise.NoiseScaleAverage`) and checkpoints them with the run; a
checkpoint written before they existed resumes with the averages started afresh.

It also keeps the placement the last round left (:class:`~collapipe_core.state.Placement`: segments,
link rates and powers), which the next round's state carries so the cost model charges the TEBs that
change device; the checkpoint carries it, so a resumed or forked run's next round sees the same
previous placement as the uninterrupted run. A checkpoint written before it existed resumes without
one: that round counts no moves.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from collapipe_core.checkpoint import Checkpoints, DirectoryCheckpoints, config_fingerprint
from collapipe_core.config import ExperimentConfig
from collapipe_core.costmodel import Evaluation, evaluate
from collapipe_core.decision import Decision, plan_segments
from collapipe_core.explain import explain
from collapipe_core.gradient_noise import NoiseScaleAverage
from collapipe_core.network import FloatArray, device_id
from collapipe_core.pipeline.executor import AnalyticExecutor, Executor, TrainingOutcome
from collapipe_core.records import DeviceRecord, RoundRecord, RoundResult
from collapipe_core.sinks import RecordSink
from collapipe_core.state import (
    Environment,
    Placement,
    RoundState,
    build_environment,
    load_device_trace,
    observe,
    pretrained_dir,
    update_queues,
)
from collapipe_core.workspace import Workspace


@dataclass
class RunSummary:
    rounds_done: int
    total_rounds: int
    stopped_early: bool
    mean_latency_s: float = 0.0
    total_latency_s: float = 0.0
    mean_energy_j: dict[str, float] = field(default_factory=dict)  # per device, per round
    peak_memory_bytes: dict[str, float] = field(default_factory=dict)
    final_eval: dict[str, float] = field(default_factory=dict)
    infeasible_rounds: int = 0
    data_truncated_rows: int = 0  # user files: rows cut to the model's lengths (data.truncate)
    gradient_noise_scale: float | None = None  # B_noise (samples) averaged up to the last round done


def make_executor(config: ExperimentConfig, workspace: Workspace) -> tuple[Executor, Environment]:
    """The configured executor and the environment it runs in (vocabularies come from the data; the
    trace, the data files and the pretrained checkpoint are read through ``workspace``)."""
    from collapipe_core.data import load_dataset, vocab_sizes

    trace = load_device_trace(config, workspace)
    pretrained = pretrained_dir(config, workspace)
    if config.executor in ("simulated", "distributed"):
        bundle = load_dataset(config, workspace)
        env = build_environment(config, bundle.src_vocab_size, bundle.tgt_vocab_size, trace, pretrained)
        if config.executor == "distributed":
            from collapipe_core.pipeline.distributed import DistributedExecutor

            return DistributedExecutor(config, bundle, pretrained_dir=pretrained), env
        from collapipe_core.pipeline.simulated import SimulatedExecutor

        return SimulatedExecutor(config, bundle, pretrained_dir=pretrained), env
    # the analytic executor trains nothing: the data is read for its vocabulary only
    src_vocab, tgt_size = vocab_sizes(config, workspace)
    return AnalyticExecutor(), build_environment(config, src_vocab, tgt_size, trace, pretrained)


class Runner:
    def __init__(
        self,
        config: ExperimentConfig,
        sink: RecordSink,
        checkpoint_dir: str | Path | None = None,
        workspace: Workspace | None = None,
        checkpoints: Checkpoints | None = None,
    ) -> None:
        """``workspace`` says which files and policies the config may name (default: the local one:
        plain paths and import paths, for the CLI and scripts; the service passes its own).
        Checkpoints go to ``checkpoints`` (the service's), or to ``checkpoint_dir`` (``checkpoint.pt``
        in it), or nowhere."""
        if checkpoints is not None and checkpoint_dir is not None:
            raise ValueError("give checkpoint_dir or checkpoints, not both")
        workspace = workspace or Workspace.local()
        self.config = config
        self.sink = sink
        self.checkpoints: Checkpoints | None = (
            DirectoryCheckpoints(Path(checkpoint_dir)) if checkpoint_dir is not None else checkpoints
        )
        self.policy = workspace.policies.create(config.scheduler.policy)
        self.executor, self.env = make_executor(config, workspace)
        bundle = getattr(self.executor, "bundle", None)
        self.data_truncated_rows = int(bundle.truncated_rows) if bundle is not None else 0
        shape = self.env.scenario.shape
        self.queues: FloatArray = np.zeros(shape)
        self.next_round = 0
        self.gradient_noise = NoiseScaleAverage()
        self.previous: Placement | None = None  # where the last round left the encoder
        self._summary_acc = _SummaryAccumulator(self.env)

    def resume(self) -> int:
        """Load the checkpoint if there is one; returns the round the run continues at."""
        if self.checkpoints is None:
            return 0
        payload = self.checkpoints.load()
        if payload is None:
            return 0
        if payload["config_fingerprint"] != config_fingerprint(self.config):
            raise ValueError(
                f"{self.checkpoints}: the checkpoint was written by a different config "
                "(only training.rounds may change on resume); use another output directory"
            )
        self.next_round = int(payload["next_round"])
        self.queues = np.asarray(payload["queues"], dtype=np.float64)
        self.executor.load_state_dict(payload["executor"])
        self._summary_acc.load(payload["summary"])
        noise = payload.get("gradient_noise")
        self.gradient_noise = NoiseScaleAverage() if noise is None else NoiseScaleAverage.from_json(noise)
        previous = payload.get("previous_placement")
        self.previous = None if previous is None else Placement.from_json(previous)
        return self.next_round

    def run(
        self,
        max_rounds: int | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        on_round: Callable[[RoundResult], None] | None = None,
    ) -> RunSummary:
        """Run until the configured rounds are done, ``max_rounds`` more are done, or ``should_stop()``."""
        total = self.config.training.rounds
        end = total if max_rounds is None else min(total, self.next_round + max_rounds)
        stopped = False
        while self.next_round < end:
            result = self.run_round(self.next_round)
            self.sink.write_round(result)
            self.next_round += 1
            self._checkpoint()
            if on_round is not None:
                on_round(result)
            if should_stop() and self.next_round < end:
                stopped = True
                break
        summary = self._summary_acc.summary(self.next_round, total, stopped or self.next_round < total)
        summary.data_truncated_rows = self.data_truncated_rows
        summary.gradient_noise_scale = self.gradient_noise.noise_scale
        return summary

    def run_round(self, t: int) -> RoundResult:
        state = observe(self.env, t, self.queues, self.previous, self.gradient_noise.noise_scale)
        started = time.perf_counter()
        decision = self.policy.decide(state)
        solve_time = time.perf_counter() - started
        ev = evaluate(state, decision)
        explanation = explain(state, decision, ev, getattr(self.policy, "minimises_objective", False))
        outcome = self.executor.execute(state, decision)
        self.gradient_noise = self.gradient_noise.update(outcome.gradient_noise)
        result = build_result(
            state,
            decision,
            ev,
            outcome,
            self.policy.name,
            solve_time,
            self.gradient_noise.noise_scale,
            explanation,
        )
        self.queues = update_queues(self.queues, ev.energy_j, self.env.scenario.energy_budget_j)
        self.previous = Placement.of(decision, ev.rate_bps)
        self._summary_acc.add(result, ev)
        return result

    def _checkpoint(self) -> None:
        if self.checkpoints is None:
            return
        self.checkpoints.save(
            {
                "next_round": self.next_round,
                "queues": self.queues,
                "executor": self.executor.state_dict(),
                "config_fingerprint": config_fingerprint(self.config),
                "summary": self._summary_acc.dump(),
                "gradient_noise": self.gradient_noise.to_json(),
                "previous_placement": None if self.previous is None else self.previous.to_json(),
            },
        )


def build_result(
    state: RoundState,
    decision: Decision,
    ev: Evaluation,
    outcome: TrainingOutcome,
    policy_name: str,
    solve_time_s: float,
    gradient_noise_scale: float | None = None,
    explanation: dict[str, Any] | None = None,
) -> RoundResult:
    """Turn a round's decision, modeled figures and training outcome into records.

    ``gradient_noise_scale``: B_noise averaged over the rounds so far (the runner's); the outcome
    carries this round's own estimates."""
    sc = state.scenario
    noise = outcome.gradient_noise
    devices = []
    for n, cluster in enumerate(decision.clusters):
        ranges = plan_segments(cluster.num_blocks) if decision.mode == "pipeline" else None
        for k in range(sc.devices_per_cluster):
            block_range = ranges[k] if ranges is not None else range(0, cluster.num_blocks[k])
            devices.append(
                DeviceRecord(
                    round=state.round_index,
                    cluster=n,
                    device=k,
                    device_id=device_id(n, k),
                    profile=sc.profile_names[n * sc.devices_per_cluster + k],
                    num_blocks=cluster.num_blocks[k],
                    block_start=block_range.start,
                    block_end=block_range.stop,
                    bandwidth_share=cluster.bandwidth_share[k],
                    power_w=cluster.power_w[k],
                    rate_bps=float(ev.rate_bps[n, k]),
                    compute_s=float(ev.compute_s[n, k]),
                    comm_s=float(ev.comm_s[n, k]),
                    idle_s=float(ev.idle_s[n, k]),
                    energy_j=float(ev.energy_j[n, k]),
                    queue=float(state.queues[n, k]),
                    memory_bytes=float(ev.memory_bytes[n, k]),
                    memory_capacity_bytes=float(sc.memory_bytes[n, k]),
                    energy_budget_j=float(sc.energy_budget_j[n, k]),
                    available=bool(state.available[n, k]),
                    measured=dict(outcome.measured.get(device_id(n, k), {})),
                )
            )
    record = RoundRecord(
        round=state.round_index,
        policy=policy_name,
        latency_s=ev.latency_s,
        aggregation_s=ev.aggregation_s,
        objective=ev.objective,
        objective_latency=ev.objective_latency,
        objective_convergence=ev.objective_convergence,
        objective_energy=ev.objective_energy,
        convergence=ev.convergence,
        num_microbatches=[c.num_microbatches for c in decision.clusters],
        makespan_s=[float(x) for x in ev.pipeline_s],
        bubble_fraction=[float(x) for x in ev.bubble_fraction],
        solve_time_s=solve_time_s,
        solver_iterations=decision.solver_iterations,
        feasible=ev.feasible,
        violations=list(ev.violations),
        train_loss=outcome.train_loss,
        eval_loss=outcome.eval_loss,
        eval_metrics=dict(outcome.eval_metrics),
        decision=decision.to_json(),
        measured={participant: dict(figures) for participant, figures in outcome.measured.items()},
        gradient_noise_scale=gradient_noise_scale,
        gradient_variance=None if noise is None else noise.trace,
        gradient_sq_norm=None if noise is None else noise.sq_norm,
        blocks_moved=int(ev.blocks_moved.sum()),
        redistribution_s=[float(x) for x in ev.redistribution_s],
        moves_latency_share=moves_latency_share(ev),
        explanation=explanation or {},
    )
    return RoundResult(round=record, devices=tuple(devices))


def moves_latency_share(ev: Evaluation) -> float | None:
    """The share of the round latency the block moves cost (None when the latency is not finite)."""
    if not (math.isfinite(ev.latency_s) and math.isfinite(ev.moves_latency_s)) or ev.latency_s <= 0:
        return None
    return ev.moves_latency_s / ev.latency_s


class _SummaryAccumulator:
    """Running totals for the end-of-run summary; checkpointed with the run."""

    def __init__(self, env: Environment) -> None:
        self.ids = env.scenario.device_ids()
        shape = env.scenario.shape
        self.rounds = 0
        self.latency = 0.0
        self.energy = np.zeros(shape)
        self.peak_memory = np.zeros(shape)
        self.infeasible = 0
        self.final_eval: dict[str, float] = {}

    def add(self, result: RoundResult, ev: Evaluation) -> None:
        self.rounds += 1
        self.latency += ev.latency_s
        self.energy += ev.energy_j
        self.peak_memory = np.maximum(self.peak_memory, ev.memory_bytes)
        self.infeasible += 0 if ev.feasible else 1
        if result.round.eval_loss is not None:
            self.final_eval = {"eval_loss": result.round.eval_loss, **result.round.eval_metrics}

    def dump(self) -> dict[str, object]:
        return dict(vars(self))

    def load(self, data: dict[str, object]) -> None:
        vars(self).update(data)

    def summary(self, rounds_done: int, total: int, stopped: bool) -> RunSummary:
        count = max(self.rounds, 1)
        return RunSummary(
            rounds_done=rounds_done,
            total_rounds=total,
            stopped_early=stopped,
            mean_latency_s=self.latency / count,
            total_latency_s=self.latency,
            mean_energy_j={i: float(e) / count for i, e in zip(self.ids, self.energy.ravel(), strict=True)},
            peak_memory_bytes={i: float(m) for i, m in zip(self.ids, self.peak_memory.ravel(), strict=True)},
            final_eval=dict(self.final_eval),
            infeasible_rounds=self.infeasible,
        )
