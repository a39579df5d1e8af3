"""Cut a model into pipeline stages: embedding (CU) | one segment of TEBs per device | head (edge).

The plan is computed first and is a pure function of the segment vector (:func:`plan_segments`);
:func:`split_model` then wraps the model's own submodules, so stages share parameters with the model
(no copies) and a stage's parameter names are the model's (``blocks.3.qkv.weight`` in the stage is
``blocks.3.qkv.weight`` in the model): ``stage.state_dict()`` is a slice of ``model.state_dict()``.

Stage interface, as ``torch.distributed.pipelining`` needs it (plain tensors in and out, masks and
decoder ids as keyword inputs that the schedule chunks per micro-batch):

- embedding: ``forward(src) -> h``;
- segment k: ``forward(h, *, src_mask) -> h``; a device with 0 blocks gets an empty segment that
  returns ``h`` itself;
- head: ``forward(h, *, src_mask, dec_in=None) -> logits``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..models import EncoderStackModel

LossFn = Callable[[Tensor, Tensor], Tensor]


def plan_segments(num_blocks: Sequence[int]) -> tuple[range, ...]:
    """Contiguous TEB index ranges per device, in device order (an empty range for a 0-block device).

    >>> plan_segments([2, 0, 3])
    (range(0, 2), range(2, 2), range(2, 5))
    """
    counts: list[int] = []
    for k, n in enumerate(num_blocks):
        try:
            if isinstance(n, bool):
                raise TypeError
            count = operator.index(n)
        except TypeError:
            raise ValueError(
                f"num_blocks[{k}] = {n!r} is not an integer; give the number of TEBs on each device"
            ) from None
        if count < 0:
            raise ValueError(f"num_blocks[{k}] = {count} is negative; a device holds 0 or more TEBs")
        counts.append(count)
    ranges: list[range] = []
    start = 0
    for count in counts:
        ranges.append(range(start, start + count))
        start += count
    return tuple(ranges)


class EmbeddingStage(nn.Module):
    """The CU's stage: ``forward(src) -> h``, src (B, S) int64, h (B, S, d)."""

    def __init__(self, model: EncoderStackModel) -> None:
        super().__init__()
        self.embedding = model.embedding

    def forward(self, src: Tensor) -> Tensor:
        h: Tensor = self.embedding(src)
        return h


class SegmentStage(nn.Module):
    """One device's contiguous TEBs: ``forward(h, *, src_mask) -> h``, h (B, S, d)."""

    def __init__(self, model: EncoderStackModel, block_range: range) -> None:
        super().__init__()
        self.block_range = block_range
        # keyed by the model's block index, so parameter names match the model's
        self.blocks = nn.ModuleDict({str(i): model.blocks[i] for i in block_range})

    def forward(self, h: Tensor, *, src_mask: Tensor) -> Tensor:
        for block in self.blocks.values():
            h = block(h, src_mask)
        return h


class HeadStage(nn.Module):
    """The edge server's stage: ``forward(h, *, src_mask, dec_in=None) -> logits``."""

    def __init__(self, model: EncoderStackModel) -> None:
        super().__init__()
        self.head = model.head

    def forward(self, h: Tensor, *, src_mask: Tensor, dec_in: Tensor | None = None) -> Tensor:
        logits: Tensor = self.head(h, src_mask, dec_in)
        return logits


@dataclass(frozen=True, eq=False)
class Stages:
    """A model cut into stages that share its parameters. ``kind`` is the model's kind."""

    embedding: EmbeddingStage
    segments: tuple[SegmentStage, ...]
    head: HeadStage
    kind: str

    def in_order(self) -> tuple[nn.Module, ...]:
        """(embedding, segment 0, ..., segment K-1, head)."""
        return (self.embedding, *self.segments, self.head)

    def forward_chain(self, src: Tensor, src_mask: Tensor, dec_in: Tensor | None = None) -> Tensor:
        """Run all stages in order, as the pipeline does for one micro-batch."""
        h = self.embedding(src)
        for segment in self.segments:
            h = segment(h, src_mask=src_mask)
        logits: Tensor = self.head(h, src_mask=src_mask, dec_in=dec_in)
        return logits


def split_model(model: EncoderStackModel, num_blocks: Sequence[int]) -> Stages:
    """Cut ``model`` so that device k holds ``num_blocks[k]`` consecutive TEBs."""
    ranges = plan_segments(num_blocks)
    total = sum(len(r) for r in ranges)
    if total != len(model.blocks):
        raise ValueError(
            f"segment vector {list(num_blocks)} places {total} TEBs but the model has "
            f"{len(model.blocks)}; the entries must sum to num_blocks = {len(model.blocks)}"
        )
    return Stages(
        embedding=EmbeddingStage(model),
        segments=tuple(SegmentStage(model, r) for r in ranges),
        head=HeadStage(model),
        kind=model.kind,
    )


def stage_param_names(model: EncoderStackModel, num_blocks: Sequence[int]) -> dict[str, list[str]]:
    """Parameter names (as in ``model.named_parameters()``) per stage: "embedding", "device0", ..., "head"."""
    stages = split_model(model, num_blocks)
    names = {"embedding": [name for name, _ in stages.embedding.named_parameters()]}
    for k, segment in enumerate(stages.segments):
        names[f"device{k}"] = [name for name, _ in segment.named_parameters()]
    names["head"] = [name for name, _ in stages.head.named_parameters()]
    return names


def accumulate_microbatches(
    stages: Stages, loss_fn: LossFn, src: Tensor, src_mask: Tensor, tgt: Tensor, num_microbatches: int
) -> float:
    """Forward and backward ``num_microbatches`` equal chunks of the batch; return the mean loss.

    Each chunk's loss is divided by ``num_microbatches`` before ``backward``, so ``.grad`` accumulates
    (it is not zeroed here) the gradient of the mean of per-micro-batch mean losses — what GPipe/1F1B
    under ``torch.distributed.pipelining`` computes with a mean ``loss_fn`` and ``scale_grads=True``.
    For the classifier, and for seq2seq without target padding, that equals the full-batch gradient.
    With target padding the micro-batches hold different numbers of real tokens, and the mean of
    their means is not the mean over all tokens.

    Seq2seq: ``tgt`` is (B, T+1); ``dec_in = tgt[:, :-1]`` and the labels are ``tgt[:, 1:]``.
    Classifier: ``tgt`` is (B,) class indices.
    """
    batch = src.shape[0]
    if num_microbatches < 1 or batch % num_microbatches:
        raise ValueError(
            f"batch size {batch} is not divisible into {num_microbatches} equal micro-batches; "
            f"choose a number of micro-batches that divides {batch}"
        )
    if src_mask.shape[0] != batch or tgt.shape[0] != batch:
        raise ValueError(
            f"src ({batch}), src_mask ({src_mask.shape[0]}) and tgt ({tgt.shape[0]}) "
            "must have the same batch size"
        )
    size = batch // num_microbatches
    total = 0.0
    chunks = (torch.split(t, size) for t in (src, src_mask, tgt))
    for src_mb, mask_mb, tgt_mb in zip(*chunks, strict=True):
        if stages.kind == "seq2seq":
            dec_in, labels = tgt_mb[:, :-1], tgt_mb[:, 1:]
        else:
            dec_in, labels = None, tgt_mb
        loss = loss_fn(stages.forward_chain(src_mb, mask_mb, dec_in), labels)
        torch.autograd.backward(loss / num_microbatches)
        total += loss.item()
    return total / num_microbatches
