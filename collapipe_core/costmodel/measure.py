"""Measure what each part of the split model costs per sample, without allocating a weight.

A model is three parts: ``embedding(src) -> h`` (CU), ``block(h, src_mask) -> h`` (each of the L
identical blocks on the devices) and ``head(h, src_mask, dec_in=None) -> logits`` (edge server).
:func:`measure_model` takes them from the meta skeleton :func:`collapipe_core.models.build_skeleton`
builds (builtin or Hugging Face: the modules training materialises); :func:`measure_parts` runs one
of each on a micro-batch of ``batch_size`` samples (all-real masks, token id 0) and divides by it:

- **FLOPs**, forward and backward, by ``torch.utils.flop_counter.FlopCounterMode``: matrix products
  only (a multiply-add = 2 FLOPs: ``mm``/``addmm``/``bmm``, attention's QKᵀ and AV). Backward is
  run, ``output.backward(ones)`` with every floating input and parameter requiring grad: the
  gradients of inputs and of weights (2 × forward for every product). Embedding lookups, norms,
  activations, softmax and the loss are not counted: the embedding (CU) measures 0 FLOPs.
- **Parameters**, from the modules. A parameter shared by two parts (an LM head tied to the token
  embedding: gpt2, bart, llama with ``tie_word_embeddings``) is counted once, on the earlier part in
  pipeline order (embedding → block → head): the embedding, which owns the token table that the
  head's LM head aliases. (A builtin seq2seq head ties its LM head to its own target embedding.)
- **Activations kept for backward**: every tensor autograd saves in the forward pass
  (``torch.autograd.graph.saved_tensors_hooks``), deduplicated by storage (q, k, v views of one qkv
  output count once, as their whole storage), parameters and buffers excluded (they are the
  weights' state, not activations); their elements and their bytes at the dtype they are kept in. The
  part's input h counts when the part keeps it (its first norm does). For the embedding and the head a
  tensor kept once per micro-batch rather than per sample (position indices, s or T elements) counts per
  sample at ``batch_size`` 1, the default: a few elements too many on the CU and the edge server (their
  memory is not modeled); the block's bytes are split (below).
- **Payload**: the elements of the block output h, per sample (what crosses each link, forward as
  activation and backward as gradient; a block's input and output shapes must agree), and their bytes at
  the boundary's dtype (the stages cast their output to the training precision's: fp32, or bf16).
- **As the run trains**: the parts are measured as they run — in ``precision`` bf16 under CPU autocast
  (its saved tensors are bf16 where autocast casts), with the skeleton's frozen parameters (a LoRA base:
  ``requires_grad`` False, so backward computes no weight gradient for them: measured, not assumed) —
  and the block also wrapped in ``torch.utils.checkpoint`` (activation recomputation: only its inputs are
  kept, and backward runs the forward again). The block's **saved bytes** are per sample as the slope
  between micro-batches of ``batch_size`` and twice that (what grows with the samples), the rest a fixed
  part per micro-batch (autocast's low-precision copies of trainable weights, a causal mask).

Every run is under ``FakeTensorMode`` on CPU with fresh stand-ins for the parameters and buffers
(``torch.nn.utils.stateless``, the way ``torch.func.functional_call`` swaps them, held through
backward): nothing is allocated, the modules are not changed and get no
``.grad``. Profiling traps (torch 2.13, CPU): on the meta device ``scaled_dot_product_attention``
takes its math path, which saves the h·s² attention probabilities the CPU fused kernel does not
keep, and models that read mask values fail there (transformers' mask helpers call ``.item()``;
they treat fake tensors as traced and skip that); under FakeTensorMode FlopCounterMode counts 0
FLOPs for CPU's fused attention. So FLOPs are counted with SDPA pinned to its math backend (the same
products), and saved tensors with the kernel CPU dispatch picks, the one training runs (the tests
compare them with real CPU runs). Hugging Face models are built with attention ``sdpa`` (``eager``
would keep the probabilities), and their causal/padding mask is materialised as under tracing: a
(1, 1, s, s) mask per sample that real training keeps too when a batch has padding. Modules run in
their current mode (skeletons are built in training mode: dropout > 0 adds its masks and moves CPU
attention to its math path). Shapes are measured in the skeletons' fp32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.utils.checkpoint
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.utils.stateless import _reparametrize_module
from torch.utils.flop_counter import FlopCounterMode

from collapipe_core.config import ModelConfig, PeftConfig
from collapipe_core.models.precision import autocast, boundary_dtype


@dataclass(frozen=True)
class PartCost:
    """One part's measured costs, per sample."""

    forward_flops: float
    backward_flops: float
    params: int  # a shared parameter only on the first part that holds it
    saved_elements: float  # activations autograd keeps for backward (parameters excluded)
    trainable_params: int  # of ``params``, those that train (requires_grad)
    param_bytes: float  # ``params`` as stored (a frozen base at the precision, trainable ones fp32)
    saved_bytes: float  # the bytes of what is kept for backward, per sample (at the precision)
    saved_fixed_bytes: float  # and what is kept per micro-batch whatever its size


@dataclass(frozen=True)
class Recomputation:
    """One block run with activation recomputation (``torch.utils.checkpoint``), per sample."""

    backward_flops: float  # the backward with the forward run again
    saved_bytes: float  # what the checkpointed block keeps: its inputs
    saved_fixed_bytes: float


@dataclass(frozen=True)
class MeasuredParts:
    """Per-sample costs of the embedding (CU), one block (device) and the head (edge server)."""

    embedding: PartCost
    block: PartCost
    head: PartCost
    payload_elements: float  # the block output h crossing each link
    payload_bytes: float  # at the stages' boundary dtype
    recomputed_block: Recomputation


_Kind = Literal["tokens", "mask", "hidden"]
_Spec = tuple[_Kind, tuple[int, ...]]


@dataclass(frozen=True)
class _Run:
    forward_flops: float
    backward_flops: float
    saved_elements: float
    saved_bytes: float
    output_shape: tuple[int, ...]
    output_dtype: torch.dtype


def measure_model(
    model_cfg: ModelConfig,
    vocab_size: int,
    tgt_size: int,
    pretrained_dir: Path | None = None,
    peft: PeftConfig | None = None,
    precision: str = "fp32",
) -> MeasuredParts:
    """Measure ``model_cfg``'s parts on one sample of ``seq_len`` tokens (and ``target_len`` decoder
    inputs for seq2seq). ``tgt_size``: target vocabulary (seq2seq, causal_lm) or classes (classifier);
    ``pretrained_dir``: the resolved checkpoint whose config.json the architecture comes from; ``peft``
    and ``precision``: the adapters and the precision the run trains with (``training``).
    """
    # the skeleton of every source (builtin, and Hugging Face families through models.hf) is
    # collapipe_core.models.build_skeleton's: the model build_model trains, on the meta device
    from collapipe_core.models import build_skeleton

    skeleton = build_skeleton(
        model_cfg, vocab_size, tgt_size, pretrained_dir=pretrained_dir, peft=peft, precision=precision
    )
    target_len = model_cfg.target_len if model_cfg.kind == "seq2seq" else None
    embedding, blocks, head = skeleton.embedding, skeleton.blocks, skeleton.head
    if not (isinstance(embedding, nn.Module) and isinstance(head, nn.Module)):
        raise TypeError("a model skeleton needs .embedding and .head modules")
    if not isinstance(blocks, nn.ModuleList) or len(blocks) == 0:
        raise TypeError("a model skeleton needs .blocks, a non-empty nn.ModuleList")
    return measure_parts(embedding, blocks[0], head, model_cfg.seq_len, target_len, precision=precision)


def measure_parts(
    embedding: nn.Module,
    block: nn.Module,
    head: nn.Module,
    seq_len: int,
    target_len: int | None = None,
    batch_size: int = 1,
    precision: str = "fp32",
) -> MeasuredParts:
    """Measure the three parts on ``batch_size`` samples of ``seq_len`` source tokens, per sample, as
    they train in ``precision`` (fp32, or bf16 under CPU autocast), the block also with recomputation.

    ``target_len``: the length of a seq2seq head's decoder input ``dec_in``; None for heads without
    one. The modules may live on any device (meta skeletons: nothing is allocated).
    """
    if seq_len < 1 or batch_size < 1 or (target_len is not None and target_len < 1):
        raise ValueError(
            f"seq_len, target_len and batch_size must be positive, got {seq_len}, {target_len}, {batch_size}"
        )
    b = batch_size
    owned: set[int] = set()
    counts = [_count_new_params(part, owned) for part in (embedding, block, head)]
    boundary = boundary_dtype(precision) or torch.float32
    emb = _measure(embedding, [("tokens", (b, seq_len))], torch.float32, precision)
    width = emb.output_shape[1:]

    def block_specs(batch: int) -> list[_Spec]:
        return [("hidden", (batch, *width)), ("mask", (batch, seq_len))]

    def head_specs(batch: int) -> list[_Spec]:
        dec_in: list[_Spec] = [] if target_len is None else [("tokens", (batch, target_len))]
        return [*block_specs(batch), *dec_in]

    def embedding_specs(batch: int) -> list[_Spec]:
        return [("tokens", (batch, seq_len))]

    blk = _measure(block, block_specs(b), boundary, precision)
    if blk.output_shape != emb.output_shape:
        raise ValueError(
            f"a block maps h of shape {emb.output_shape} to {blk.output_shape}; the blocks of a "
            "pipeline must keep the shape of h"
        )
    hd = _measure(head, head_specs(b), boundary, precision)
    # the embedding's and the head's kept bytes are not part of the profile: per sample at b, no slope
    parts = [_per_sample(emb, *counts[0], emb.saved_bytes / b, 0.0, b)]
    parts.append(
        _per_sample(blk, *counts[1], *_saved_bytes(block, blk, block_specs, b, boundary, precision), b)
    )
    parts.append(_per_sample(hd, *counts[2], hd.saved_bytes / b, 0.0, b))
    checkpointed = _Checkpointed(block)
    again = _measure(checkpointed, block_specs(b), boundary, precision)
    per_sample, fixed = _saved_bytes(checkpointed, again, block_specs, b, boundary, precision)
    return MeasuredParts(
        embedding=parts[0],
        block=parts[1],
        head=parts[2],
        payload_elements=_numel(blk.output_shape) / b,
        payload_bytes=_numel(blk.output_shape) * boundary.itemsize / b,
        recomputed_block=Recomputation(again.backward_flops / b, per_sample, fixed),
    )


class _Checkpointed(nn.Module):
    """A block whose activations are recomputed in backward (non-reentrant, as training wraps it)."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, *args: Tensor) -> Tensor:
        out: Tensor = torch.utils.checkpoint.checkpoint(self.block, *args, use_reentrant=False)
        return out


def _count_new_params(module: nn.Module, owned: set[int]) -> tuple[int, int, float]:
    """(parameters, trainable ones, bytes as stored) of ``module`` not already counted on an earlier part
    (tied weights count once)."""
    count = trainable = 0
    stored = 0.0
    for p in module.parameters():
        if id(p) not in owned:
            owned.add(id(p))
            count += p.numel()
            trainable += p.numel() if p.requires_grad else 0
            stored += p.numel() * p.element_size()
    return count, trainable, stored


def _measure(module: nn.Module, specs: Sequence[_Spec], dtype: torch.dtype, precision: str = "fp32") -> _Run:
    forward_flops, backward_flops, output = _count_flops(module, specs, dtype, precision)
    elements, nbytes = _count_saved(module, specs, dtype, precision)
    return _Run(
        forward_flops=forward_flops,
        backward_flops=backward_flops,
        saved_elements=elements,
        saved_bytes=nbytes,
        output_shape=tuple(output.shape),
        output_dtype=output.dtype,
    )


def _count_flops(
    module: nn.Module, specs: Sequence[_Spec], dtype: torch.dtype, precision: str = "fp32"
) -> tuple[float, float, Tensor]:
    """Forward and backward FLOPs, attention pinned to SDPA's math path (FlopCounterMode counts it)."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        state = _fresh_state(module)
        args = [_make_input(spec, dtype) for spec in specs]
        with (
            _standing_in(module, state),
            sdpa_kernel(SDPBackend.MATH),
            FlopCounterMode(display=False) as counter,
        ):
            with autocast(precision):
                output = _call(module, args)
            forward = counter.get_total_flops()
            if output.requires_grad:  # backward outside autocast, as training runs it
                torch.autograd.backward(output, torch.ones_like(output))
            total = counter.get_total_flops()
    return float(forward), float(total - forward), output


def _count_saved(
    module: nn.Module, specs: Sequence[_Spec], dtype: torch.dtype, precision: str
) -> tuple[float, float]:
    """(elements, bytes) of the distinct storages autograd saves, with the attention kernel CPU picks."""
    saved: list[Tensor] = []

    def keep(t: Tensor) -> Tensor:
        saved.append(t)
        return t

    with FakeTensorMode(allow_non_fake_inputs=True):
        state = _fresh_state(module)
        args = [_make_input(spec, dtype) for spec in specs]
        with (
            _standing_in(module, state),
            autocast(precision),
            torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t),
        ):
            _call(module, args)
    weights = {_storage_id(t) for t in state.values()}
    storages = {
        _storage_id(t): (t.untyped_storage().nbytes() // t.element_size(), t.untyped_storage().nbytes())
        for t in saved
        if _storage_id(t) not in weights
    }
    return float(sum(e for e, _ in storages.values())), float(sum(n for _, n in storages.values()))


def _saved_bytes(
    module: nn.Module,
    run: _Run,
    specs: Callable[[int], list[_Spec]],
    batch: int,
    dtype: torch.dtype,
    precision: str,
) -> tuple[float, float]:
    """(bytes per sample, bytes per micro-batch) of what ``module`` keeps for backward: the slope and the
    intercept between micro-batches of ``batch`` (``run``, measured) and ``2·batch`` samples."""
    one = run.saved_bytes
    two = _count_saved(module, specs(2 * batch), dtype, precision)[1]
    per_sample = (two - one) / batch
    return per_sample, max(one - per_sample * batch, 0.0)


def _storage_id(t: Tensor) -> int:
    """The address of the tensor's StorageImpl, what torch's StorageWeakRef keys on; unique while the
    tensor lives (saved tensors and stand-ins are held until counted). Fake tensors have no data
    pointer to compare."""
    address: int = t.untyped_storage()._cdata
    return address


def _fresh_state(module: nn.Module) -> dict[str, Tensor]:
    """Fake CPU stand-ins for the parameters and buffers (tied ones share one stand-in)."""
    return {
        name: torch.empty(t.shape, dtype=t.dtype, device="cpu", requires_grad=t.requires_grad)
        for name, t in [*module.named_parameters(), *module.named_buffers()]
    }


def _standing_in(module: nn.Module, state: dict[str, Tensor]) -> contextlib.AbstractContextManager[object]:
    """``module`` with ``state`` in place of its parameters and buffers, forward *and* backward (a
    checkpointed block runs its forward again in backward, so the stand-ins stay until the end)."""
    return _reparametrize_module(module, state, tie_weights=True)


def _call(module: nn.Module, args: list[Tensor]) -> Tensor:
    output = module(*args)
    if not isinstance(output, Tensor):
        raise TypeError(
            f"{type(module).__name__} returned {type(output).__name__}; a pipeline part returns one tensor"
        )
    return output


def _make_input(spec: _Spec, dtype: torch.dtype) -> Tensor:
    kind, shape = spec
    if kind == "tokens":
        return torch.zeros(shape, dtype=torch.int64, device="cpu")
    if kind == "mask":
        return torch.ones(shape, dtype=torch.bool, device="cpu")
    return torch.empty(shape, dtype=dtype, device="cpu", requires_grad=True)


def _per_sample(
    run: _Run,
    params: int,
    trainable: int,
    stored: float,
    saved_bytes: float,
    fixed_bytes: float,
    batch_size: int,
) -> PartCost:
    """The part's costs per sample (``saved_bytes`` already per sample, ``fixed_bytes`` per micro-batch)."""
    return PartCost(
        forward_flops=run.forward_flops / batch_size,
        backward_flops=run.backward_flops / batch_size,
        params=params,
        saved_elements=run.saved_elements / batch_size,
        trainable_params=trainable,
        param_bytes=stored,
        saved_bytes=saved_bytes,
        saved_fixed_bytes=fixed_bytes,
    )


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count
