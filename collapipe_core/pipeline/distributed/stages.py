"""A rank's pipeline stage: its slice of the model, static shapes, and the torch schedule around it.

The recipe that works on torch 2.13 with gloo (notes/torch-pipelining-cpu.md): static example tensors
for every stage's input and output, with ``requires_grad=True`` on floating ones (they decide whether
gradient buffers exist); fixed padded shapes (S = seq_len, T = target_len) and micro-batches of exactly
b samples; the masks and the decoder input ids as keyword inputs of ``step()`` (chunked per micro-batch
and passed to every rank's stage); plain tensors between stages.

The rank's model is a skeleton on the meta device: :func:`materialize` loads the round's weights into
just the stage's submodules (``assign=True``: the shipped tensors become the parameters, nothing else
is allocated) and :func:`release` turns them back into meta tensors when the round is over.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.distributed.pipelining.schedules import PipelineScheduleSingle

from collapipe_core.config import ModelConfig
from collapipe_core.models import EncoderStackModel
from collapipe_core.pipeline.distributed.measure import RecvPrefetch, StepClock
from collapipe_core.pipeline.distributed.plan import Role, Schedule
from collapipe_core.pipeline.split import EmbeddingStage, HeadStage, SegmentStage

FaultHook = Callable[[int], None]


@dataclass(frozen=True)
class StageShapes:
    """Per-micro-batch shapes crossing the stage boundaries."""

    microbatch_size: int  # b
    seq_len: int  # S, sources are padded to it
    d_model: int
    target_len: int  # T: decoder input length (seq2seq)
    num_outputs: int  # target vocabulary (seq2seq) or classes (classifier)
    kind: str

    @staticmethod
    def of(model: ModelConfig, microbatch_size: int, num_outputs: int) -> StageShapes:
        return StageShapes(
            microbatch_size=microbatch_size,
            seq_len=model.seq_len,
            d_model=model.d_model,
            target_len=model.target_len,
            num_outputs=num_outputs,
            kind=model.kind,
        )

    def hidden(self, device: torch.device) -> Tensor:
        """(b, S, d) activation between stages."""
        return torch.zeros(
            self.microbatch_size, self.seq_len, self.d_model, device=device, requires_grad=True
        )

    def logits(self, device: torch.device) -> Tensor:
        """(b, T, V) for seq2seq, (b, C) for the classifier."""
        if self.kind == "seq2seq":
            shape: tuple[int, ...] = (self.microbatch_size, self.target_len, self.num_outputs)
        else:
            shape = (self.microbatch_size, self.num_outputs)
        return torch.zeros(shape, device=device, requires_grad=True)

    def io(self, role: Role, device: torch.device) -> tuple[tuple[Tensor, ...], Tensor]:
        """(example inputs, example output) of a stage."""
        if role == "cu":
            src = torch.zeros(self.microbatch_size, self.seq_len, dtype=torch.long, device=device)
            return (src,), self.hidden(device)
        if role == "device":
            return (self.hidden(device),), self.hidden(device)
        return (self.hidden(device),), self.logits(device)


def stage_module(model: EncoderStackModel, role: Role, block_range: range | None = None) -> nn.Module:
    """The submodules of ``model`` a role runs, sharing the model's parameters and names."""
    if role == "cu":
        return EmbeddingStage(model)
    if role == "edge":
        return HeadStage(model)
    if block_range is None or len(block_range) == 0:
        raise ValueError("a device stage needs a non-empty range of TEBs")
    return SegmentStage(model, block_range)


def materialize(module: nn.Module, weights: Mapping[str, Tensor]) -> None:
    """Make ``module``'s (meta) parameters the given tensors; every parameter must be given."""
    expected = {name for name, _ in module.named_parameters()} | {name for name, _ in module.named_buffers()}
    if set(weights) != expected:
        missing, extra = sorted(expected - set(weights)), sorted(set(weights) - expected)
        raise ValueError(f"stage weights do not match the stage: missing {missing}, unexpected {extra}")
    module.load_state_dict(dict(weights), assign=True)


def release(module: nn.Module) -> None:
    """Free the stage's tensors: parameters (and gradients) become meta tensors again."""
    for p in module.parameters():
        p.grad = None
    module.to("meta")


class TimedStage(PipelineStage):
    """A ``PipelineStage`` that times every forward and backward micro-batch into a :class:`StepClock`."""

    def __init__(
        self,
        submodule: nn.Module,
        stage_index: int,
        num_stages: int,
        *,
        clock: StepClock,
        fault: FaultHook | None = None,
        prefetch: RecvPrefetch | None = None,
        device: torch.device | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(submodule, stage_index, num_stages, device or torch.device("cpu"), **kwargs)
        self.clock = clock
        self.fault = fault
        self.prefetch = prefetch

    def get_fwd_recv_ops(self, fwd_chunk_id: int) -> list[dist.P2POp]:
        ops = super().get_fwd_recv_ops(fwd_chunk_id)
        if self.prefetch is not None and self.chunks is not None:
            self.prefetch.post(ops)  # i first: gloo matches a peer's receives in posting order
            if fwd_chunk_id + 1 < self.chunks:
                self.prefetch.post(super().get_fwd_recv_ops(fwd_chunk_id + 1))
        return ops

    def get_bwd_recv_ops(self, bwd_chunk_id: int) -> list[dist.P2POp]:
        ops = super().get_bwd_recv_ops(bwd_chunk_id)
        if self.prefetch is not None and self.chunks is not None:
            self.prefetch.post(ops)
            if bwd_chunk_id + 1 < self.chunks:
                self.prefetch.post(super().get_bwd_recv_ops(bwd_chunk_id + 1))
        return ops

    def forward_one_chunk(self, fwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
        if self.fault is not None:
            self.fault(fwd_chunk_id)
        started = time.perf_counter()
        self.clock.forward_starts_s.append(started)
        try:
            return super().forward_one_chunk(fwd_chunk_id, *args, **kwargs)
        finally:
            self.clock.forward_chunks_s.append(time.perf_counter() - started)

    def backward_one_chunk(self, bwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        self.clock.backward_starts_s.append(started)
        try:
            return super().backward_one_chunk(bwd_chunk_id, *args, **kwargs)
        finally:
            self.clock.backward_chunks_s.append(time.perf_counter() - started)


def build_schedule(
    module: nn.Module,
    role: Role,
    stage_index: int,
    num_stages: int,
    shapes: StageShapes,
    group: Any,
    schedule: Schedule,
    num_microbatches: int,
    loss_fn: Callable[..., Tensor],
    clock: StepClock,
    fault: FaultHook | None = None,
    prefetch: RecvPrefetch | None = None,
    device: torch.device | None = None,
) -> PipelineScheduleSingle:
    """The torch schedule (GPipe or 1F1B) that runs ``module`` as stage ``stage_index`` of ``group``."""
    inputs, output = shapes.io(role, device or torch.device("cpu"))
    stage = TimedStage(
        module,
        stage_index,
        num_stages,
        clock=clock,
        fault=fault,
        prefetch=prefetch,
        device=device,
        input_args=inputs,
        output_args=output,
        group=group,
    )
    cls = Schedule1F1B if schedule == "1f1b" else ScheduleGPipe
    return cls(stage, n_microbatches=num_microbatches, loss_fn=loss_fn)


def run_step(
    sched: PipelineScheduleSingle,
    role: Role,
    kind: str,
    batch: Mapping[str, Tensor],
    losses: list[Tensor],
) -> None:
    """One pipeline iteration with the rank's part of the batch.

    CU: ``src``; device: ``src_mask``; edge: ``src_mask`` and ``tgt`` (seq2seq: decoder input
    ``tgt[:, :-1]``, labels ``tgt[:, 1:]``; classifier: labels).
    """
    if role == "cu":
        sched.step(batch["src"], return_outputs=False)
    elif role == "device":
        sched.step(src_mask=batch["src_mask"], return_outputs=False)
    elif kind == "seq2seq":
        tgt = batch["tgt"]
        sched.step(
            src_mask=batch["src_mask"],
            dec_in=tgt[:, :-1],
            target=tgt[:, 1:],
            losses=losses,
            return_outputs=False,
        )
    else:
        sched.step(src_mask=batch["src_mask"], target=batch["tgt"], losses=losses, return_outputs=False)
