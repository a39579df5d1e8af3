"""Cut a model into pipeline stages: embedding (CU) | one segment of TEBs per device | head (edge).

The plan is computed first and is a pure function of the segment vector
(:func:`collapipe_core.decision.plan_segments`, the one block → device map of the product);
:func:`split_model` then wraps the model's own submodules, so stages share parameters with the model
(no copies) and a stage's parameter names are the model's (``blocks.3.qkv.weight`` in the stage is
``blocks.3.qkv.weight`` in the model): ``stage.state_dict()`` is a slice of ``model.state_dict()``.

Stage interface, as ``torch.distributed.pipelining`` needs it (plain tensors in and out, masks and
decoder ids as keyword inputs that the schedule chunks per micro-batch):

- embedding: ``forward(src) -> h``;
- segment k: ``forward(h, *, src_mask) -> h``; a device with 0 blocks gets an empty segment that
  returns ``h`` itself;
- head: ``forward(h, *, src_mask, dec_in=None) -> logits``.

Tied weights (a Hugging Face model's input embedding and LM head, :mod:`collapipe_core.models.hf`) are
one ``Parameter`` held by the embedding stage and the head stage, under a different name in each (both
are keys of ``model.state_dict()``). In one process its gradient accumulates once from both uses;
:func:`tied_parameter_names` lists them for the distributed executor, whose CU and edge ranks hold a
copy each and must sum the two gradients after every step.

:func:`accumulate_microbatches` trains one step with the loss of :mod:`collapipe_core.models.losses`:
Σ over micro-batches of the summed loss terms, divided by the step's number of terms.

Every stage runs in the training precision (``precision``, :mod:`collapipe_core.models.precision`):
under bf16, CPU autocast inside the stage and its output cast to bf16 (the head's logits to fp32 for
the loss), so the simulated executor computes what the distributed ranks compute and send. A device
that recomputes (``recompute``) checkpoints each of its blocks (:class:`SegmentStage`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ..decision import plan_segments
from ..models import EncoderStackModel, StepLoss, split_targets
from ..models.precision import autocast, to_boundary, to_loss


class EmbeddingStage(nn.Module):
    """The CU's stage: ``forward(src) -> h``, src (B, S) int64, h (B, S, d) at the boundary dtype."""

    def __init__(self, model: EncoderStackModel, precision: str = "fp32") -> None:
        super().__init__()
        self.embedding = model.embedding
        self.precision = precision

    def forward(self, src: Tensor) -> Tensor:
        with autocast(self.precision):
            h: Tensor = self.embedding(src)
        return to_boundary(h, self.precision)


class SegmentStage(nn.Module):
    """One device's contiguous TEBs: ``forward(h, *, src_mask) -> h``, h (B, S, d).

    ``recompute``: each block runs under ``torch.utils.checkpoint`` (non-reentrant): only the blocks'
    inputs are kept for backward, which runs each block's forward again. Non-reentrant, because the
    input of a segment may not require grad (a frozen embedding's output), and reentrant checkpointing
    then computes no gradient for the block's adapters.
    """

    def __init__(
        self, model: EncoderStackModel, block_range: range, recompute: bool = False, precision: str = "fp32"
    ) -> None:
        super().__init__()
        self.block_range = block_range
        self.recompute = recompute
        self.precision = precision
        # keyed by the model's block index, so parameter names match the model's
        self.blocks = nn.ModuleDict({str(i): model.blocks[i] for i in block_range})

    def forward(self, h: Tensor, *, src_mask: Tensor) -> Tensor:
        with autocast(self.precision):
            for block in self.blocks.values():
                if self.recompute:
                    h = checkpoint(block, h, src_mask, use_reentrant=False)
                else:
                    h = block(h, src_mask)
        return to_boundary(h, self.precision)


class HeadStage(nn.Module):
    """The edge server's stage: ``forward(h, *, src_mask, dec_in=None) -> logits`` (fp32 under bf16)."""

    def __init__(self, model: EncoderStackModel, precision: str = "fp32") -> None:
        super().__init__()
        self.head = model.head
        self.precision = precision

    def forward(self, h: Tensor, *, src_mask: Tensor, dec_in: Tensor | None = None) -> Tensor:
        with autocast(self.precision):
            logits: Tensor = self.head(h, src_mask, dec_in)
        return to_loss(logits, self.precision)


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


def split_model(
    model: EncoderStackModel,
    num_blocks: Sequence[int],
    *,
    recompute: Sequence[bool] | None = None,
    precision: str = "fp32",
) -> Stages:
    """Cut ``model`` so that device k holds ``num_blocks[k]`` consecutive TEBs.

    ``recompute[k]``: device k recomputes its blocks' activations in backward (default: none does);
    ``precision``: every stage runs in the training precision and casts its output to the boundary dtype
    (:mod:`collapipe_core.models.precision`).
    """
    ranges = plan_segments(num_blocks)
    flags = [False] * len(ranges) if recompute is None else [bool(x) for x in recompute]
    if len(flags) != len(ranges):
        raise ValueError(f"{len(flags)} recompute flags for {len(ranges)} devices; give one per device")
    total = sum(len(r) for r in ranges)
    if total != len(model.blocks):
        raise ValueError(
            f"segment vector {list(num_blocks)} places {total} TEBs but the model has "
            f"{len(model.blocks)}; the entries must sum to num_blocks = {len(model.blocks)}"
        )
    return Stages(
        embedding=EmbeddingStage(model, precision),
        segments=tuple(
            SegmentStage(model, r, again, precision) for r, again in zip(ranges, flags, strict=True)
        ),
        head=HeadStage(model, precision),
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


def tied_parameter_names(stages: Stages) -> list[tuple[str, ...]]:
    """Parameters held by more than one stage: each one's names in the stages that hold it, in stage order.

    >>> tied_parameter_names(split_model(gpt2, [2, 1]))  # doctest: +SKIP
    [('embedding.wte.weight', 'head.lm_head.weight')]
    """
    names: dict[int, list[str]] = {}
    for stage in stages.in_order():
        for name, p in stage.named_parameters():
            names.setdefault(id(p), []).append(name)
    return [tuple(found) for found in names.values() if len(found) > 1]


def parameter_aliases(module: nn.Module) -> dict[str, str]:
    """A tied parameter's further names in ``module.state_dict()`` -> its name in ``named_parameters()``.

    A tied parameter is listed once by ``named_parameters()`` (its first name) but under each of its
    names by ``state_dict()``; weights shipped by state-dict name must be tied again after loading.
    """
    canonical: dict[int, str] = {id(p): name for name, p in module.named_parameters()}
    return {
        name: canonical[id(t)]
        for name, t in module.state_dict(keep_vars=True).items()
        if isinstance(t, nn.Parameter) and canonical.get(id(t), name) != name
    }


def tie_parameters(module: nn.Module, aliases: dict[str, str]) -> None:
    """Make each alias (``parameter_aliases``) the very ``Parameter`` of its canonical name again."""
    for alias, name in aliases.items():
        owner, _, attr = alias.rpartition(".")
        module.get_submodule(owner).register_parameter(attr, module.get_parameter(name))


def accumulate_microbatches(
    stages: Stages, loss: StepLoss, src: Tensor, src_mask: Tensor, tgt: Tensor, num_microbatches: int
) -> float:
    """Forward and backward ``num_microbatches`` equal chunks of the batch; return the step's loss.

    The step's loss is L = Σ_m loss.sum(chunk m) / N, N = ``loss.num_terms`` of the whole batch (non-PAD
    target tokens, or samples): each chunk's backward is of ``loss.sum(chunk) / N``, so ``.grad``
    accumulates (it is not zeroed here) ∇L — the gradient of the whole batch's token-weighted mean,
    however the padding falls into chunks. ``torch.distributed.pipelining`` computes the same with that
    ``loss_fn`` and ``scale_grads=False``.

    Targets as :func:`collapipe_core.models.split_targets` reads them: seq2seq ``tgt`` (B, T+1),
    causal_lm (B, S) next tokens, classifier (B,) classes.
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
    if loss.kind != stages.kind:
        raise ValueError(f"a {loss.kind} loss cannot train a {stages.kind} model")
    num_terms = loss.checked_terms(split_targets(stages.kind, tgt)[1])  # N of the whole step
    size = batch // num_microbatches
    total = 0.0
    chunks = (torch.split(t, size) for t in (src, src_mask, tgt))
    for src_mb, mask_mb, tgt_mb in zip(*chunks, strict=True):
        dec_in, labels = split_targets(stages.kind, tgt_mb)
        part = loss.sum(stages.forward_chain(src_mb, mask_mb, dec_in), labels) / num_terms
        torch.autograd.backward(part)
        total += part.item()
    return total
