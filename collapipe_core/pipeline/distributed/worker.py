"""One rank of the distributed executor: ``python -m collapipe_core.pipeline.distributed.worker``.

Started with torchrun's environment variables — ``MASTER_ADDR``, ``MASTER_PORT`` (the driver's
rendezvous store), ``WORLD_SIZE``, ``RANK`` and optionally ``LOCAL_RANK`` — by the driver itself on one
host (:mod:`.launch`) or by any launcher on other hosts (docs/distributed.md). A rank joins the process
group, builds the model skeleton on the meta device, then serves rounds until told to stop:

1. create the process group of every cluster's pipeline this round (all ranks, same order; a model
   with tied weights also has one group per cluster of its CU and edge server, made at start-up);
2. the cluster's ranks train their stages for I iterations with the torch schedule; clusters run one
   after the other (a world barrier between them) unless ``concurrent_clusters``. Around the
   schedule of a measured iteration (0, 2, 4, …: :func:`collapipe_core.gradient_noise.is_measured_iteration`),
   hooks on the stage's parameters read each micro-batch's squared gradient norm and, after the step,
   the accumulated gradient's (:mod:`collapipe_core.pipeline.gradient_norms`): a rank reports its own
   stage's sums per measured iteration, and the driver adds them over the pipeline's ranks (a tied
   parameter's micro-batch gradients are first added on the CU, which counts it);
3. FedAvg: each scheduled rank sends its trained parameters (only what trains: with LoRA the adapters,
   :mod:`collapipe_core.federated.exchange`) to its CU; the CUs all-reduce the data-size-weighted sum in
   float64 over the CU group; the CU of cluster 0 returns the average;
4. a world barrier (a rank that vanished fails it within the timeout), then the report.

A rank that fails reports the error and exits at once, so that its neighbours see the connection
close instead of waiting for the timeout.

Test hook: ``COLLAPIPE_DISTRIBUTED_FAULT="RANK:ROUND[:exit|hang]"`` makes that rank exit (code 1) or
hang in the middle of that round's first pipeline step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from collapipe_core.federated.exchange import averaged_keys
from collapipe_core.gradient_noise import GradientNormSums, is_measured_iteration
from collapipe_core.models import EncoderStackModel, build_skeleton, loss_for
from collapipe_core.pipeline.distributed import protocol as p
from collapipe_core.pipeline.distributed.link import LinkEmulator
from collapipe_core.pipeline.distributed.measure import (
    RecvPrefetch,
    StepClock,
    TensorBytesTracker,
    instrument_p2p,
    reset_rss_peak,
    rss_peak_bytes,
    tensor_bytes,
    timed,
)
from collapipe_core.pipeline.distributed.plan import ClusterPlan, Role, local_optimizer_state
from collapipe_core.pipeline.distributed.stages import (
    MicrobatchLoss,
    StageShapes,
    build_schedule,
    materialize,
    release,
    run_step,
    stage_module,
    tied_locally,
)
from collapipe_core.pipeline.gradient_norms import GradientNormProbe, sum_of_squares
from collapipe_core.pipeline.simulated import make_optimizer

FAULT_ENV = "COLLAPIPE_DISTRIBUTED_FAULT"
CONTROL_TIMEOUT = timedelta(days=30)  # a rank waits for the driver's next round as long as it lives
_PEER_WORDS = (
    "connection closed",
    "connection reset",
    "broken pipe",
    "timed out",
    "timeout",
    "socket",
    "peer",
)


@dataclass(frozen=True)
class Fault:
    rank: int
    round_index: int
    action: str  # "exit" or "hang"

    @staticmethod
    def from_env(value: str | None) -> Fault | None:
        if not value:
            return None
        parts = value.split(":")
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("exit", "hang")):
            raise ValueError(f"{FAULT_ENV}={value!r}: expected RANK:ROUND or RANK:ROUND:exit|hang")
        return Fault(int(parts[0]), int(parts[1]), parts[2] if len(parts) == 3 else "exit")

    def trigger(self) -> None:
        if self.action == "hang":
            while True:
                time.sleep(3600)
        os._exit(1)


def is_peer_failure(err: BaseException) -> bool:
    """True when ``err`` (or its cause) is a lost or timed-out peer rather than a fault of this rank."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, dist.DistError | TimeoutError | ConnectionError):
            return True
        text = str(current).lower()
        if any(word in text for word in _PEER_WORDS):
            return True
        current = current.__cause__ or current.__context__
    return False


class RankWorker:
    """The state a rank keeps between rounds: the process groups and the meta-device model skeleton."""

    def __init__(self, rank: int, spec: p.WorldSpec, device: torch.device) -> None:
        from collapipe_core.config import ExperimentConfig

        self.rank = rank
        self.spec = spec
        self.device = device
        self.config = ExperimentConfig.model_validate_json(spec.config_json)
        self.layout = spec.layout
        self.timeout = timedelta(seconds=spec.timeout_s)
        self.cluster, self.role, self.device_index = self.layout.locate(rank)
        t = self.config.training
        self.precision = t.precision
        # shapes and names only, on the meta device (adapters and frozen dtypes included); stages are
        # loaded per round
        self.model: EncoderStackModel = build_skeleton(
            self.config.model,
            spec.src_vocab_size,
            spec.tgt_size,
            pad_id=spec.pad_id,
            bos_id=spec.bos_id,
            eos_id=spec.eos_id,
            pretrained_dir=spec.pretrained_dir,
            peft=t.peft,
            precision=t.precision,
        )
        self.state_keys = averaged_keys(self.model)  # what FedAvg averages, in the model's order
        self.shapes = StageShapes.measure(self.model, self.config.model, 1, self.precision)
        self.loss = loss_for(self.config.model.kind, pad_id=spec.pad_id)
        self.groups: dict[tuple[int, ...], Any] = {}
        self.leaders = dist.new_group(list(self.layout.leader_ranks()), timeout=self.timeout)
        # tied weights (embedding = LM head) that train: the CU and the edge server of each cluster sum
        # their grads (a frozen tied weight, a LoRA base, has none)
        self.tied = {
            role: [n for n in tied_locally(self.model, role) if self.model.get_parameter(n).requires_grad]
            for role in ("cu", "edge")
        }
        self.tie_groups = (
            [
                dist.new_group([self.layout.cu_rank(n), self.layout.edge_rank(n)], timeout=self.timeout)
                for n in range(self.layout.num_clusters)
            ]
            if self.tied["cu"]
            else []
        )
        self.fault = Fault.from_env(os.environ.get(FAULT_ENV))

    # -- a round ---------------------------------------------------------------------------------

    def run(self, task: p.RankTask) -> p.RankReport:
        report = p.RankReport(seq=task.seq, rank=self.rank, ok=True)
        for plan in task.plans:  # every rank creates every group, in the same order
            if plan.ranks not in self.groups:
                self.groups[plan.ranks] = dist.new_group(list(plan.ranks), timeout=self.timeout)
        stage = task.stage
        if stage is None and self.fault is not None and self._faults_at(task.round_index):
            self.fault.trigger()  # a rank that sits the round out fails before the first barrier
        mine = next(
            (plan for plan in task.plans if stage is not None and plan.cluster == stage.cluster), None
        )
        module: nn.Module | None = None
        try:
            for plan in task.plans:
                if plan is mine:
                    module = self._train(task, plan, report)
                if not self.spec.concurrent_clusters:
                    dist.barrier()
            if mine is not None and module is not None:
                self._aggregate(task, mine, module, report)
            dist.barrier()
        finally:
            if module is not None:
                release(module)
        return report

    def _faults_at(self, round_index: int) -> bool:
        fault = self.fault
        return fault is not None and fault.rank == self.rank and fault.round_index == round_index

    def _fault_hook(self, round_index: int, num_microbatches: int) -> Callable[[int], None] | None:
        if not self._faults_at(round_index):
            return None
        fault = self.fault
        assert fault is not None
        fired = [False]

        def hook(chunk: int) -> None:
            if not fired[0] and chunk >= min(1, num_microbatches - 1):  # mid-step when M > 1
                fired[0] = True
                fault.trigger()

        return hook

    def _train(self, task: p.RankTask, plan: ClusterPlan, report: p.RankReport) -> nn.Module:
        stage = task.stage
        assert stage is not None
        role: Role = stage.role
        module = stage_module(
            self.model, role, stage.block_range, recompute=stage.recompute, precision=self.precision
        )
        materialize(module, {k: v.to(self.device) for k, v in stage.weights.items()})
        names = [name for name, q in module.named_parameters() if q.requires_grad]  # the optimizer's
        # a stage that trains nothing (a LoRA CU or edge server without modules_to_save) has no optimizer
        optimizer = make_optimizer(self.config, module) if names else None
        if optimizer is not None and stage.optimizer_state is not None:  # this cluster's moments of these
            groups = optimizer.state_dict()["param_groups"]  # blocks, wherever they were
            optimizer.load_state_dict(local_optimizer_state(stage.optimizer_state, names, groups))
        torch.manual_seed(stage.dropout_seed)
        clock = StepClock()
        prefetch = RecvPrefetch() if self.spec.backend == "gloo" else None
        shapes = dataclasses.replace(self.shapes, microbatch_size=task.microbatch_size)
        tied = [module.get_parameter(name) for name in self.tied.get(role, [])]
        loss = MicrobatchLoss(self.loss)
        sched = build_schedule(
            module,
            role,
            plan.stage_index(self.rank),
            plan.num_stages,
            shapes,
            self.groups[plan.ranks],
            plan.schedule,
            plan.num_microbatches,
            timed(clock, loss),
            clock,
            self._fault_hook(task.round_index, plan.num_microbatches),
            prefetch,
            self.device,
        )
        rate = stage.send_rate_bps
        link = LinkEmulator(rate, self.spec.timeout_s) if rate is not None else None
        resident = tensor_bytes([*module.parameters(), *_optimizer_tensors(optimizer)])
        module.train()
        tracker = TensorBytesTracker() if self.spec.track_tensor_bytes else None
        baseline_rss = reset_rss_peak()
        losses_per_step: list[list[float]] = []
        norms_per_step: list[tuple[float, float]] = []  # per measured iteration
        probe = GradientNormProbe(module.parameters(), kept=tied)
        for it, batch in enumerate(stage.batches):
            measuring = is_measured_iteration(it)
            # the tracker sees the first iteration only: every iteration has the same shapes, and the
            # Python call per op it costs would otherwise slow every iteration's compute
            tracking = tracker if tracker is not None and it == 0 else contextlib.nullcontext()
            with tracking:
                module.zero_grad(set_to_none=True)
                if measuring:
                    probe.start_step()
                losses: list[Tensor] = []
                inputs = {k: v.to(self.device) for k, v in batch.items()}
                started = time.perf_counter()
                with instrument_p2p(clock, link, prefetch):
                    run_step(sched, role, self.config.model.kind, inputs, losses, loss)
                if tied:
                    self._sum_tied_gradients(tied, stage.cluster)
                if link is not None:  # what the step queued has left and arrived (a send wait)
                    drained = time.perf_counter()
                    link.flush()
                    clock.send_s += time.perf_counter() - drained
                ended = time.perf_counter()
                if prefetch is not None and prefetch.pending():
                    raise RuntimeError(f"{prefetch.pending()} receives posted ahead were never used")
                clock.step_s += ended - started
                clock.steps.append((started, ended))
                if measuring:
                    sums = probe.finish_step(plan.num_microbatches, task.microbatch_size)
                    if tied:
                        sums = sums + self._tied_norm_sums(probe, tied, stage.cluster, sums)
                    norms_per_step.append((sums.microbatch_sq_sum, sums.step_sq))
                optimizer_started = time.perf_counter()
                if optimizer is not None:
                    optimizer.step()
                clock.optimizer_s += time.perf_counter() - optimizer_started
            if role == "edge":
                losses_per_step.append([float(loss.item()) for loss in losses])
        probe.close()
        peak_rss = rss_peak_bytes()
        if link is not None:
            link.close()
        measured = clock.figures()
        measured.update(
            {
                "schedule_fallback": float(plan.schedule_fallback),
                "schedule_1f1b": float(plan.schedule == "1f1b"),
                "num_stages": float(plan.num_stages),
                "stage_index": float(plan.stage_index(self.rank)),
                "resident_state_bytes": float(resident),
                "state_bytes": float(
                    tensor_bytes(
                        [
                            *module.parameters(),
                            *(q.grad for q in module.parameters()),
                            *_optimizer_tensors(optimizer),
                        ]
                    )
                ),
            }
        )
        if link is not None:
            measured["link_s"] = link.busy_s
        if tracker is not None:
            measured["peak_tensor_bytes"] = float(resident + tracker.peak_bytes)
        if baseline_rss is not None and peak_rss is not None:
            # the kernel stores its high-water mark only at some events (VmHWM reads the larger of
            # that and the current, approximately counted, RSS): the mark after training can read a
            # few pages below the baseline read at the start, which the process did hold
            peak_rss = max(peak_rss, baseline_rss)
            measured["baseline_rss_bytes"] = float(baseline_rss)
            measured["peak_rss_bytes"] = float(peak_rss)
            measured["peak_rss_delta_bytes"] = float(peak_rss - baseline_rss)
        report.measured = measured
        report.details = clock.details()
        report.optimizer_state = {
            names[i]: {k: _to_cpu(v) for k, v in entry.items()}
            for i, entry in (optimizer.state_dict()["state"] if optimizer is not None else {}).items()
        }
        report.losses = losses_per_step
        report.gradient_norms = norms_per_step
        if self.spec.report_gradients:
            report.gradients = {
                n: q.grad.detach().cpu().clone() for n, q in module.named_parameters() if q.grad is not None
            }
        return module

    def _sum_tied_gradients(self, tied: list[nn.Parameter], cluster: int) -> None:
        """All-reduce (sum) the tied parameters' gradients of this CU and its edge server.

        Each rank holds a copy and saw one use (input embedding, LM head); the sum is the gradient of
        the single parameter in one process, so both copies take the same optimizer step.
        """
        for param in tied:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            dist.all_reduce(param.grad, op=dist.ReduceOp.SUM, group=self.tie_groups[cluster])

    def _tied_norm_sums(
        self, probe: GradientNormProbe, tied: list[nn.Parameter], cluster: int, step: GradientNormSums
    ) -> GradientNormSums:
        """The tied parameters' squared norms, counted on the CU (the edge server's part is zero).

        Their micro-batch gradients are the sums of the CU's and the edge server's contributions: each
        rank kept its own per micro-batch (in backward order, the same on both: micro-batch 0 to M−1),
        the edge server adds them into the CU's, and the CU takes the norms; ``.grad`` is already the
        all-reduced sum (``_sum_tied_gradients``).
        """
        micro = total = 0.0
        cu = self.layout.cu_rank(cluster)
        for param in tied:
            parts = probe.contributions(param)
            if len(parts) != step.num_microbatches:
                raise RuntimeError(
                    f"{len(parts)} backward passes reached a tied parameter in a step of "
                    f"{step.num_microbatches} micro-batches"
                )
            for part in parts:
                dist.reduce(part, dst=cu, op=dist.ReduceOp.SUM, group=self.tie_groups[cluster])
            if self.role == "cu":
                micro += sum_of_squares(torch.linalg.vector_norm(part) for part in parts)
                assert param.grad is not None  # all-reduced by _sum_tied_gradients
                total += sum_of_squares([torch.linalg.vector_norm(param.grad)])
        return GradientNormSums(micro, total, step.num_microbatches, step.microbatch_size)

    def _aggregate(
        self, task: p.RankTask, plan: ClusterPlan, module: nn.Module, report: p.RankReport
    ) -> None:
        """FedAvg: gather the cluster's trained tensors on its CU, all-reduce the weighted sum over the CUs.

        Only what trains crosses (a tied parameter under each of its names): a rank whose stage trains
        nothing (a LoRA CU or edge server without modules_to_save) sends nothing. What a rank sent is
        reported as ``fedavg_upload_bytes``.
        """
        group = self.groups[plan.ranks]
        cu = plan.ranks[0]
        state = module.state_dict()
        own = {name: state[name] for name in averaged_keys(module)}
        if self.role != "cu":
            if own:
                flat = torch.cat([t.reshape(-1) for t in own.values()])
                dist.send(flat, dst=cu, group=group)
                report.measured["fedavg_upload_bytes"] = float(flat.numel() * flat.element_size())
            else:
                report.measured["fedavg_upload_bytes"] = 0.0
            return
        stage = task.stage
        assert stage is not None
        parts: dict[str, Tensor] = dict(own)
        for rank in plan.ranks[1:]:
            _, role, _ = self.layout.locate(rank)
            part = stage_module(self.model, role, plan.block_ranges.get(rank))
            skeleton = part.state_dict()
            shapes = [(n, skeleton[n].shape, skeleton[n].dtype) for n in averaged_keys(part)]
            if not shapes:
                continue
            flat = torch.empty(sum(s.numel() for _, s, _ in shapes), dtype=shapes[0][2], device=self.device)
            dist.recv(flat, src=rank, group=group)
            for (name, shape, _), piece in zip(
                shapes, torch.split(flat, [s.numel() for _, s, _ in shapes]), strict=True
            ):
                parts[name] = piece.view(shape)
        sizes = stage.data_sizes
        weight = sizes[plan.cluster] / float(sum(sizes))
        total = torch.cat([parts[k].reshape(-1).to(torch.float64) * weight for k in self.state_keys])
        dist.all_reduce(total, op=dist.ReduceOp.SUM, group=self.leaders)
        if plan.cluster == 0:
            averaged: dict[str, Tensor] = {}
            offset = 0
            for key in self.state_keys:
                like = parts[key]
                averaged[key] = total[offset : offset + like.numel()].view(like.shape).to(like.dtype).cpu()
                offset += like.numel()
            report.averaged_state = averaged


def _optimizer_tensors(optimizer: torch.optim.Optimizer | None) -> list[Tensor]:
    if optimizer is None:
        return []
    state = optimizer.state_dict()["state"]
    return [v for entry in state.values() for v in entry.values() if isinstance(v, Tensor)]


def _to_cpu(value: Any) -> Any:
    return value.detach().cpu() if isinstance(value, Tensor) else value


# -- the process -------------------------------------------------------------------------------


def _device(backend: str) -> torch.device:
    if backend == "nccl":  # one GPU per local rank (untested on this project's CPU machines)
        local = int(os.environ.get("LOCAL_RANK", "0")) % max(torch.cuda.device_count(), 1)
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def _fail(control: p.Store, key_report: str, key_count: str, report: p.RankReport) -> None:
    with contextlib.suppress(Exception):
        p.put_payload(control, key_report, p.dumps(report))
        control.add(key_count, 1)
    sys.stderr.flush()
    os._exit(1)


def main() -> None:
    """Join the run described by the environment (torchrun's variables) and serve rounds until STOP."""
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    torch.set_num_threads(1)
    control = p.PrefixStore(
        p.CONTROL_PREFIX, p.TCPStore(addr, port, is_master=False, timeout=CONTROL_TIMEOUT)
    )
    spec: p.WorldSpec = p.loads(control.get(p.init_key()))
    try:
        if spec.layout.world_size != world_size:
            raise ValueError(f"WORLD_SIZE={world_size} but the run has {spec.layout.world_size} ranks")
        device = _device(spec.backend)
        pg_store = p.PrefixStore(
            p.PG_PREFIX, p.TCPStore(addr, port, is_master=False, timeout=timedelta(seconds=spec.timeout_s))
        )
        dist.init_process_group(
            spec.backend,
            store=pg_store,
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=spec.timeout_s),
        )
        worker = RankWorker(rank, spec, device)
    except BaseException:
        p.put(control, p.ready_key(rank), traceback.format_exc().encode())
        os._exit(1)
    p.put(control, p.ready_key(rank), b"ok")
    seq = 0
    while True:
        data = p.take_payload(control, p.task_key(seq, rank))
        if data == p.STOP:
            break
        try:
            task: p.RankTask = p.loads(data)
            del data
            report = worker.run(task)
        except BaseException as err:
            failure = p.RankReport(
                seq=seq,
                rank=rank,
                ok=False,
                error="".join(traceback.format_exception(err)),
                peer_failure=is_peer_failure(err),
                failed_at=time.time(),
            )
            _fail(control, p.report_key(seq, rank), p.report_count_key(seq), failure)
        p.put_payload(control, p.report_key(seq, rank), p.dumps(report))
        control.add(p.report_count_key(seq), 1)
        seq += 1
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
