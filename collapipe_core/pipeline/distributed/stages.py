"""A rank's pipeline stage: its slice of the model, static shapes, and the torch schedule around it.

The recipe that works on torch 2.13 with gloo (notes/torch-pipelining-cpu.md): static example tensors
for every stage's input and output, with ``requires_grad=True`` on floating ones (they decide whether
gradient buffers exist); fixed padded shapes (S = seq_len, T = target_len) and micro-batches of exactly
b samples; the masks and the decoder input ids as keyword inputs of ``step()`` (chunked per micro-batch
and passed to every rank's stage); plain tensors between stages.

The loss is the step's token-weighted mean (:mod:`collapipe_core.models.losses`): the schedule's
``loss_fn`` is :class:`MicrobatchLoss`, a micro-batch's summed loss divided by the number of loss terms
of the whole step (counted by :func:`run_step` before the step), with ``scale_grads=False`` — the
gradients and the summed losses equal :func:`collapipe_core.pipeline.split.accumulate_microbatches`'.

The rank's model is a skeleton on the meta device: :func:`materialize` loads the round's weights into
just the stage's submodules (``assign=True``: the shipped tensors become the parameters, with their
dtypes — a LoRA base frozen in bf16 stays bf16 —, nothing else is allocated) and :func:`release` turns
them back into meta tensors when the round is over; both keep tied parameters tied.
:func:`tied_locally` names the parameters the CU and the edge server share.

Stages run in the training precision and cast their output to the boundary dtype
(:mod:`collapipe_core.models.precision`): under bf16 the example tensors between stages are bf16, so
activations and their gradients cross the links in bf16.
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
from collapipe_core.models import EncoderStackModel, StepLoss, split_targets
from collapipe_core.models.precision import autocast, boundary_dtype
from collapipe_core.pipeline.distributed.measure import RecvPrefetch, StepClock
from collapipe_core.pipeline.distributed.plan import Role, Schedule
from collapipe_core.pipeline.split import (
    EmbeddingStage,
    HeadStage,
    SegmentStage,
    parameter_aliases,
    split_model,
    tie_parameters,
    tied_parameter_names,
)

FaultHook = Callable[[int], None]


@dataclass(frozen=True)
class StageShapes:
    """Per-micro-batch shapes crossing the stage boundaries."""

    microbatch_size: int  # b
    seq_len: int  # S, sources are padded to it
    d_model: int
    target_len: int  # T: decoder input length (seq2seq)
    num_outputs: int  # target vocabulary (seq2seq, causal_lm) or classes (classifier)
    kind: str
    dtype: torch.dtype = torch.float32  # of the activations between stages (bf16 under precision bf16)

    @staticmethod
    def measure(
        model: EncoderStackModel, config: ModelConfig, microbatch_size: int, precision: str = "fp32"
    ) -> StageShapes:
        """The shapes of ``model`` on the meta device (the rank's skeleton): d and the output size.

        Read from the model rather than the config: a pretrained model's sizes are its config.json's.
        """
        src = torch.zeros(1, config.seq_len, dtype=torch.long, device="meta")
        mask = torch.ones(1, config.seq_len, dtype=torch.bool, device="meta")
        dec_in = torch.zeros(1, config.target_len, dtype=torch.long, device="meta")
        with torch.no_grad(), autocast(precision):
            hidden = model.embedding(src)  # (1, S, d)
            logits = model(src, mask, dec_in if config.kind == "seq2seq" else None)  # (1, [T or S,] out)
        return StageShapes(
            microbatch_size=microbatch_size,
            seq_len=config.seq_len,
            d_model=int(hidden.shape[-1]),
            target_len=config.target_len,
            num_outputs=int(logits.shape[-1]),
            kind=config.kind,
            dtype=boundary_dtype(precision) or torch.float32,
        )

    def hidden(self, device: torch.device) -> Tensor:
        """(b, S, d) activation between stages, at the boundary dtype."""
        return torch.zeros(
            self.microbatch_size,
            self.seq_len,
            self.d_model,
            dtype=self.dtype,
            device=device,
            requires_grad=True,
        )

    def logits(self, device: torch.device) -> Tensor:
        """(b, T, V) for seq2seq, (b, S, V) for a causal LM, (b, C) for the classifier; fp32 (the head
        casts its logits to fp32 for the loss)."""
        if self.kind == "seq2seq":
            shape: tuple[int, ...] = (self.microbatch_size, self.target_len, self.num_outputs)
        elif self.kind == "causal_lm":
            shape = (self.microbatch_size, self.seq_len, self.num_outputs)
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


def stage_module(
    model: EncoderStackModel,
    role: Role,
    block_range: range | None = None,
    *,
    recompute: bool = False,
    precision: str = "fp32",
) -> nn.Module:
    """The submodules of ``model`` a role runs, sharing the model's parameters and names, in the
    training ``precision``; a device that ``recompute``s checkpoints each of its blocks."""
    if role == "cu":
        return EmbeddingStage(model, precision)
    if role == "edge":
        return HeadStage(model, precision)
    if block_range is None or len(block_range) == 0:
        raise ValueError("a device stage needs a non-empty range of TEBs")
    return SegmentStage(model, block_range, recompute, precision)


def materialize(module: nn.Module, weights: Mapping[str, Tensor]) -> None:
    """Make ``module``'s (meta) state the given tensors; every ``state_dict()`` entry must be given.

    That is every parameter and persistent buffer, a tied parameter under each of its names (then tied
    again: one ``Parameter``). Non-persistent buffers stay on meta: no stage reads them (the Hugging Face
    parts pass positions explicitly and keep LLaMA's rotary frequencies outside the module tree).
    """
    expected = set(module.state_dict())
    if set(weights) != expected:
        missing, extra = sorted(expected - set(weights)), sorted(set(weights) - expected)
        raise ValueError(f"stage weights do not match the stage: missing {missing}, unexpected {extra}")
    aliases = parameter_aliases(module)
    module.load_state_dict(dict(weights), assign=True)
    tie_parameters(module, aliases)


def release(module: nn.Module) -> None:
    """Free the stage's tensors: parameters (and gradients) become meta tensors again, still tied."""
    aliases = parameter_aliases(module)
    for p in module.parameters():
        p.grad = None
    module.to("meta")
    tie_parameters(module, aliases)


def tied_locally(model: EncoderStackModel, role: Role) -> list[str]:
    """Names, in ``role``'s stage, of the parameters it shares with another rank of its pipeline.

    Tied weights (input embedding and LM head) live on the CU and on the edge server; after each step
    the two ranks all-reduce (sum) these gradients, which then equal the single-process gradient.
    """
    if role == "device":
        return []
    names = tied_parameter_names(split_model(model, [len(model.blocks)]))
    for tied in names:
        if len(tied) != 2 or not (tied[0].startswith("embedding.") and tied[1].startswith("head.")):
            raise NotImplementedError(f"only the embedding and the head may share a parameter, not {tied}")
    return [tied[0] if role == "cu" else tied[1] for tied in names]


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
        started, cpu = time.perf_counter(), time.thread_time()
        self.clock.forward_starts_s.append(started)
        try:
            return super().forward_one_chunk(fwd_chunk_id, *args, **kwargs)
        finally:
            self.clock.forward_chunks_s.append(time.perf_counter() - started)
            self.clock.forward_cpu_chunks_s.append(time.thread_time() - cpu)

    def backward_one_chunk(self, bwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
        started, cpu = time.perf_counter(), time.thread_time()
        self.clock.backward_starts_s.append(started)
        try:
            return super().backward_one_chunk(bwd_chunk_id, *args, **kwargs)
        finally:
            self.clock.backward_chunks_s.append(time.perf_counter() - started)
            self.clock.backward_cpu_chunks_s.append(time.thread_time() - cpu)


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
    # loss_fn divides by the step's number of loss terms itself (MicrobatchLoss), so no 1/M scaling
    return cls(stage, n_microbatches=num_microbatches, loss_fn=loss_fn, scale_grads=False)


class MicrobatchLoss:
    """The schedule's ``loss_fn``: ``loss.sum(micro-batch) / N``, N the step's number of loss terms.

    :func:`run_step` sets N from the step's labels before the step; the losses the schedule reports then
    add up to the step's loss.
    """

    def __init__(self, loss: StepLoss) -> None:
        self.loss = loss
        self.num_terms = 0

    def __call__(self, logits: Tensor, labels: Tensor) -> Tensor:
        if self.num_terms < 1:
            raise RuntimeError("MicrobatchLoss used before run_step counted the step's loss terms")
        return self.loss.sum(logits, labels) / self.num_terms


def run_step(
    sched: PipelineScheduleSingle,
    role: Role,
    kind: str,
    batch: Mapping[str, Tensor],
    losses: list[Tensor],
    loss: MicrobatchLoss | None = None,
) -> None:
    """One pipeline iteration with the rank's part of the batch.

    CU: ``src``; device: ``src_mask``; edge: ``src_mask`` and ``tgt`` (seq2seq: decoder input
    ``tgt[:, :-1]``, labels ``tgt[:, 1:]``; causal_lm and classifier: labels), and ``loss``, the
    schedule's loss_fn, which learns the step's number of loss terms here.
    """
    if role == "cu":
        sched.step(batch["src"], return_outputs=False)
    elif role == "device":
        sched.step(src_mask=batch["src_mask"], return_outputs=False)
    else:
        if loss is None:
            raise ValueError("the edge server's step needs its MicrobatchLoss")
        dec_in, labels = split_targets(kind, batch["tgt"])
        loss.num_terms = loss.loss.checked_terms(labels)
        if dec_in is None:
            sched.step(src_mask=batch["src_mask"], target=labels, losses=losses, return_outputs=False)
        else:
            sched.step(
                src_mask=batch["src_mask"], dec_in=dec_in, target=labels, losses=losses, return_outputs=False
            )
