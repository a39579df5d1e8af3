"""The ``distributed`` executor: every CU, device and edge server is its own torch.distributed rank.

Same semantics as :class:`~collapipe_core.pipeline.simulated.SimulatedExecutor` — same batches (drawn
from the same seeds), one optimizer state per cluster kept across rounds, FedAvg weighted by data size,
evaluation of the global model on the held-out set in the driver — so a run's records equal the
simulated run's (with dropout 0; see docs/distributed.md), plus what was measured on each rank.

The driver keeps the global weights and every cluster's optimizer state (as the simulated executor
does, and as the checkpoint needs them after every round). Each round it ships every scheduled rank
its stage's weights — the frozen ones (a LoRA base) too: ranks keep nothing between rounds — and the
optimizer state of what trains — moving blocks between devices moves their weights and optimizer
state — and its inputs; the ranks train, average what trains with a collective over the clusters' CUs,
and send back the averaged trainable tensors and their optimizer states. Ranks keep no model state
between rounds, so a failed round leaves the driver's state as it was before it, and a resume needs
nothing but the checkpoint.

Each rank reports its stage's squared gradient norms per measured iteration; squared norms add over the
stages' disjoint parameters, so a cluster's sums are the sums over its ranks, and the round's gradient
noise estimate is the simulated executor's (:func:`collapipe_core.gradient_noise.estimate_round`).
"""

from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from collapipe_core.config import ExperimentConfig
from collapipe_core.costmodel import link_rate_bps
from collapipe_core.data import DatasetBundle, batch_indices
from collapipe_core.decision import Decision
from collapipe_core.federated.exchange import averaged_keys
from collapipe_core.gradient_noise import GradientNormSums, estimate_round, is_measured_iteration
from collapipe_core.models import source_mask
from collapipe_core.pipeline.distributed import protocol as p
from collapipe_core.pipeline.distributed.launch import WorkerPool
from collapipe_core.pipeline.distributed.plan import (
    ClusterPlan,
    Layout,
    merge_optimizer_states,
    plan_round,
    slice_optimizer_state,
)
from collapipe_core.pipeline.distributed.stages import stage_module
from collapipe_core.pipeline.executor import TrainingOutcome, recompute_flags
from collapipe_core.pipeline.quality import evaluate_model
from collapipe_core.pipeline.simulated import build_run_model, make_optimizer
from collapipe_core.pipeline.split import parameter_aliases
from collapipe_core.state import RoundState


@dataclass(frozen=True)
class DistributedOptions:
    """How the ranks run. The defaults suit one host; docs/distributed.md explains each."""

    backend: str | None = None  # None: "nccl" when CUDA is available, else "gloo"
    timeout_s: float = 120.0  # every collective and p2p (and so the longest a dead peer can stall a rank)
    startup_timeout_s: float = 300.0  # all ranks up and in the process group
    failure_grace_s: float = 2.0  # after the first failure, how long to collect the other ranks' reports
    link_emulation: bool = False  # slow every pipeline transfer to the modeled link rate
    concurrent_clusters: bool = False  # False: clusters train one after the other (clean timings)
    track_tensor_bytes: bool = True  # the TorchDispatchMode tracker (costs Python time per op)
    report_gradients: bool = False  # ranks send their last gradients back (tests)
    master_addr: str = "127.0.0.1"  # where the driver's rendezvous store listens
    master_port: int = 0  # 0: any free port
    local_ranks: tuple[int, ...] | None = None  # ranks this host starts; None: all of them


def _seed(*words: int) -> int:
    return int(np.random.SeedSequence(list(words)).generate_state(1)[0])


class DistributedExecutor:
    name = "distributed"

    def __init__(
        self,
        config: ExperimentConfig,
        bundle: DatasetBundle,
        options: DistributedOptions | None = None,
        pretrained_dir: Path | None = None,
    ) -> None:
        """``pretrained_dir``: model.pretrained_path resolved by the run's workspace (every host running
        ranks reads its config.json at the same path)."""
        self.config = config
        self.bundle = bundle
        self.options = options or DistributedOptions()
        self.pad_id = bundle.pad_id  # the data's padding id (None: windows without padding)
        self.pretrained_dir = pretrained_dir
        self.model = build_run_model(config, bundle, pretrained_dir)
        self.global_state = copy.deepcopy(self.model.state_dict())
        self.averaged = averaged_keys(self.model)  # what trains and FedAvg averages
        self.optimizer_states: list[dict[str, Any] | None] = [None] * len(bundle.shards)
        self.layout = Layout(config.network.num_clusters, config.network.devices_per_cluster)
        # the optimizer's parameters (those that train), and a trained tied parameter's further names
        self.param_names = [name for name, q in self.model.named_parameters() if q.requires_grad]
        trained = set(self.param_names)
        self.aliases = {a: n for a, n in parameter_aliases(self.model).items() if n in trained}
        self.param_groups = make_optimizer(config, self.model).state_dict()["param_groups"]
        self.last_gradients: list[dict[str, torch.Tensor]] = []  # per cluster (report_gradients)
        self.last_details: dict[str, dict[str, list[float]]] = {}  # per participant, per micro-batch
        self._pool: WorkerPool | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    # -- the Executor interface -------------------------------------------------------------------

    def execute(self, state: RoundState, decision: Decision) -> TrainingOutcome:
        plans = plan_round(self.layout, decision, state.settings.schedule)
        tasks = self._tasks(state, decision, plans)
        pool = self._ensure_pool()
        try:
            reports = pool.run(tasks, state.round_index)
        except BaseException:
            self.close(kill=True)  # the ranks are in an unknown state; the next round starts new ones
            raise
        return self._outcome(state, plans, reports)

    def state_dict(self) -> dict[str, Any]:
        return {"global_state": self.global_state, "optimizer_states": self.optimizer_states}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.global_state = state["global_state"]
        self.optimizer_states = list(state["optimizer_states"])
        self.model.load_state_dict(self.global_state)

    # -- lifecycle ---------------------------------------------------------------------------------

    def close(self, kill: bool = False) -> None:
        """Stop the ranks (they are started again by the next ``execute``)."""
        pool, self._pool = self._pool, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if pool is not None:
            if kill:
                pool.kill()
            else:
                pool.stop()

    def __enter__(self) -> DistributedExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ensure_pool(self) -> WorkerPool:
        if self._pool is None:
            o = self.options
            backend = o.backend or ("nccl" if torch.cuda.is_available() else "gloo")
            spec = p.WorldSpec(
                config_json=self.config.model_dump_json(by_alias=True),
                src_vocab_size=self.bundle.src_vocab_size,
                tgt_size=self.bundle.tgt_vocab_size,
                layout=self.layout,
                backend=backend,
                timeout_s=o.timeout_s,
                concurrent_clusters=o.concurrent_clusters,
                track_tensor_bytes=o.track_tensor_bytes,
                report_gradients=o.report_gradients,
                pad_id=self.pad_id,
                bos_id=self.bundle.bos_id,
                eos_id=self.bundle.eos_id,
                pretrained_dir=None if self.pretrained_dir is None else str(self.pretrained_dir),
            )
            self._pool = WorkerPool(
                spec,
                master_addr=o.master_addr,
                master_port=o.master_port,
                local_ranks=o.local_ranks,
                startup_timeout_s=o.startup_timeout_s,
                grace_s=o.failure_grace_s,
            )
            self._finalizer = weakref.finalize(self, WorkerPool.stop, self._pool)
        return self._pool

    # -- a round -----------------------------------------------------------------------------------

    def _tasks(
        self, state: RoundState, decision: Decision, plans: tuple[ClusterPlan, ...]
    ) -> dict[int, p.RankTask]:
        t, settings = state.round_index, state.settings
        sc = state.scenario
        rates = link_rate_bps(
            decision.bandwidth_share(),
            decision.power_w(),
            state.gain,
            sc.bandwidth_hz,
            sc.noise_density_w_per_hz,
        )
        sizes = tuple(len(shard) for shard in self.bundle.shards)
        recompute = recompute_flags(self.config.training, decision)
        tasks: dict[int, p.RankTask] = {}
        for plan in plans:
            n = plan.cluster
            shard = self.bundle.shards[n]
            batches = []
            for it in range(state.settings.local_iterations):
                step = settings.samples_per_step(plan.num_microbatches)
                idx = batch_indices(len(shard), step, (self.config.seed, t, n, it))
                src, tgt = shard.src[idx], shard.tgt[idx]
                batches.append({"src": src, "src_mask": source_mask(src, self.pad_id), "tgt": tgt})
            for rank in plan.ranks:
                _, role, k = self.layout.locate(rank)
                block_range = plan.block_ranges.get(rank)
                module = stage_module(self.model, role, block_range)
                names = [name for name, q in module.named_parameters() if q.requires_grad]
                wanted = {"cu": ("src",), "device": ("src_mask",), "edge": ("src_mask", "tgt")}[role]
                rate: float | None = None
                if self.options.link_emulation:
                    rate = {
                        "cu": sc.cu_link_rate_bps,
                        "device": float(rates[n, k]),
                        "edge": sc.edge_downlink_rate_bps,
                    }[role]
                stage = p.StageTask(
                    cluster=n,
                    role=role,
                    block_range=block_range,
                    weights={name: self.global_state[name] for name in module.state_dict()},
                    optimizer_state=slice_optimizer_state(
                        self.optimizer_states[n], self.param_names, names, self.aliases
                    ),
                    batches=[{key: batch[key] for key in wanted} for batch in batches],
                    dropout_seed=_seed(self.config.seed, t, n, 0xD0, plan.stage_index(rank)),
                    send_rate_bps=rate,
                    data_sizes=sizes if role == "cu" else (),
                    recompute=role == "device" and bool(recompute[n, k]),
                )
                tasks[rank] = self._task(
                    state, plans, stage, settings.samples_per_microbatch(plan.num_microbatches)
                )
        for rank in range(self.layout.world_size):
            tasks.setdefault(rank, self._task(state, plans, None, 1))
        return tasks

    def _task(
        self,
        state: RoundState,
        plans: tuple[ClusterPlan, ...],
        stage: p.StageTask | None,
        microbatch_size: int,
    ) -> p.RankTask:
        return p.RankTask(
            seq=-1,  # the pool numbers the rounds it hands out
            round_index=state.round_index,
            plans=plans,
            stage=stage,
            microbatch_size=microbatch_size,
        )

    def _outcome(
        self, state: RoundState, plans: tuple[ClusterPlan, ...], reports: dict[int, p.RankReport]
    ) -> TrainingOutcome:
        averaged = reports[self.layout.cu_rank(0)].averaged_state
        if averaged is None or list(averaged) != self.averaged:
            raise RuntimeError("the CU of cluster 0 did not return the averaged model")
        losses, gradients, details = [], [], {}
        norms: list[list[GradientNormSums]] = []  # per cluster, per local iteration
        measured: dict[str, dict[str, float]] = {}
        optimizer_states: list[dict[str, Any] | None] = []
        for plan in plans:
            optimizer_states.append(
                merge_optimizer_states(
                    [reports[r].optimizer_state for r in plan.ranks],
                    self.param_names,
                    self.param_groups,
                    self.aliases,
                )
            )
            cluster_loss = 0.0
            for step in reports[plan.ranks[-1]].losses:  # the edge server's: sum / N per micro-batch
                total = 0.0
                for loss in step:  # in order, as accumulate_microbatches adds them
                    total += loss
                cluster_loss += total
            losses.append(cluster_loss / state.settings.local_iterations)
            norms.append(self._norm_sums(state, plan, reports))
            grads: dict[str, torch.Tensor] = {}
            for rank in plan.ranks:  # a tied parameter's (all-reduced, equal) gradient under its model name
                grads.update({self.aliases.get(n, n): g for n, g in reports[rank].gradients.items()})
                measured[self.layout.participant_id(rank)] = dict(reports[rank].measured)
                details[self.layout.participant_id(rank)] = reports[rank].details
            gradients.append(grads)
        self.global_state = {**self.global_state, **averaged}  # the frozen weights stay as they are
        self.optimizer_states = optimizer_states
        self.last_gradients = gradients
        self.last_details = details
        self.model.load_state_dict(averaged, strict=False)
        eval_loss, metrics = evaluate_model(
            self.model,
            self.bundle.eval,
            pad_id=self.pad_id,
            bos_id=self.bundle.bos_id,
            eos_id=self.bundle.eos_id,
            precision=self.config.training.precision,
        )
        sizes = [len(shard) for shard in self.bundle.shards]
        train_loss = float(np.average(losses, weights=sizes))
        return TrainingOutcome(
            train_loss=train_loss,
            eval_loss=eval_loss,
            eval_metrics=metrics,
            measured=measured,
            gradient_noise=estimate_round(norms, sizes),
        )

    @staticmethod
    def _norm_sums(
        state: RoundState, plan: ClusterPlan, reports: dict[int, p.RankReport]
    ) -> list[GradientNormSums]:
        """A cluster's squared gradient norms per measured iteration: the sums over its ranks' stages."""
        steps = []
        m = plan.num_microbatches
        b = state.settings.samples_per_microbatch(m)
        num_measured = sum(map(is_measured_iteration, range(state.settings.local_iterations)))
        for j in range(num_measured):
            parts = [GradientNormSums(*reports[rank].gradient_norms[j], m, b) for rank in plan.ranks]
            total = parts[0]
            for part in parts[1:]:
                total = total + part
            steps.append(total)
        return steps
