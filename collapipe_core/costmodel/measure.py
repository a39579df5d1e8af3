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
  weights' state, not activations). Elements, not bytes: the profile multiplies by the devices'
  ``bytes_per_element``. The part's input h counts when the part keeps it (its first norm does).
  A tensor kept once per micro-batch rather than per sample (position indices an embedding or a
  seq2seq head saves, s or T elements) counts per sample at ``batch_size`` 1, the default: a few
  elements too many on the CU and the edge server; the blocks keep none (tested).
- **Payload**: the elements of the block output h, per sample (what crosses each link, forward as
  activation and backward as gradient; a block's input and output shapes must agree).

Both runs are under ``FakeTensorMode`` on CPU with fresh stand-ins for the parameters and buffers
(``torch.func.functional_call``): nothing is allocated, the modules are not changed and get no
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

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.func import functional_call
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from collapipe_core.config import ModelConfig


@dataclass(frozen=True)
class PartCost:
    """One part's measured costs, per sample."""

    forward_flops: float
    backward_flops: float
    params: int  # a shared parameter only on the first part that holds it
    saved_elements: float  # activations autograd keeps for backward (parameters excluded)


@dataclass(frozen=True)
class MeasuredParts:
    """Per-sample costs of the embedding (CU), one block (device) and the head (edge server)."""

    embedding: PartCost
    block: PartCost
    head: PartCost
    payload_elements: float  # the block output h crossing each link


_Kind = Literal["tokens", "mask", "hidden"]
_Spec = tuple[_Kind, tuple[int, ...]]


@dataclass(frozen=True)
class _Run:
    forward_flops: float
    backward_flops: float
    saved_elements: float
    output_shape: tuple[int, ...]
    output_dtype: torch.dtype


def measure_model(
    model_cfg: ModelConfig, vocab_size: int, tgt_size: int, pretrained_dir: Path | None = None
) -> MeasuredParts:
    """Measure ``model_cfg``'s parts on one sample of ``seq_len`` tokens (and ``target_len`` decoder
    inputs for seq2seq). ``tgt_size``: target vocabulary (seq2seq, causal_lm) or classes (classifier);
    ``pretrained_dir``: the resolved checkpoint whose config.json the architecture comes from.
    """
    # the skeleton of every source (builtin, and Hugging Face families through models.hf) is
    # collapipe_core.models.build_skeleton's: the model build_model trains, on the meta device
    from collapipe_core.models import build_skeleton

    skeleton = build_skeleton(model_cfg, vocab_size, tgt_size, pretrained_dir=pretrained_dir)
    target_len = model_cfg.target_len if model_cfg.kind == "seq2seq" else None
    embedding, blocks, head = skeleton.embedding, skeleton.blocks, skeleton.head
    if not (isinstance(embedding, nn.Module) and isinstance(head, nn.Module)):
        raise TypeError("a model skeleton needs .embedding and .head modules")
    if not isinstance(blocks, nn.ModuleList) or len(blocks) == 0:
        raise TypeError("a model skeleton needs .blocks, a non-empty nn.ModuleList")
    return measure_parts(embedding, blocks[0], head, model_cfg.seq_len, target_len)


def measure_parts(
    embedding: nn.Module,
    block: nn.Module,
    head: nn.Module,
    seq_len: int,
    target_len: int | None = None,
    batch_size: int = 1,
) -> MeasuredParts:
    """Measure the three parts on ``batch_size`` samples of ``seq_len`` source tokens, per sample.

    ``target_len``: the length of a seq2seq head's decoder input ``dec_in``; None for heads without
    one. The modules may live on any device (meta skeletons: nothing is allocated).
    """
    if seq_len < 1 or batch_size < 1 or (target_len is not None and target_len < 1):
        raise ValueError(
            f"seq_len, target_len and batch_size must be positive, got {seq_len}, {target_len}, {batch_size}"
        )
    b = batch_size
    owned: set[int] = set()
    params = [_count_new_params(part, owned) for part in (embedding, block, head)]
    mask: _Spec = ("mask", (b, seq_len))
    emb = _measure(embedding, [("tokens", (b, seq_len))], torch.float32)
    hidden: _Spec = ("hidden", emb.output_shape)
    blk = _measure(block, [hidden, mask], emb.output_dtype)
    if blk.output_shape != emb.output_shape:
        raise ValueError(
            f"a block maps h of shape {emb.output_shape} to {blk.output_shape}; the blocks of a "
            "pipeline must keep the shape of h"
        )
    dec_in: list[_Spec] = [] if target_len is None else [("tokens", (b, target_len))]
    hd = _measure(head, [hidden, mask, *dec_in], emb.output_dtype)
    return MeasuredParts(
        embedding=_per_sample(emb, params[0], b),
        block=_per_sample(blk, params[1], b),
        head=_per_sample(hd, params[2], b),
        payload_elements=_numel(blk.output_shape) / b,
    )


def _count_new_params(module: nn.Module, owned: set[int]) -> int:
    """Parameters of ``module`` not already counted on an earlier part (tied weights count once)."""
    count = 0
    for p in module.parameters():
        if id(p) not in owned:
            owned.add(id(p))
            count += p.numel()
    return count


def _measure(module: nn.Module, specs: Sequence[_Spec], dtype: torch.dtype) -> _Run:
    forward_flops, backward_flops, output = _count_flops(module, specs, dtype)
    return _Run(
        forward_flops=forward_flops,
        backward_flops=backward_flops,
        saved_elements=_count_saved_elements(module, specs, dtype),
        output_shape=tuple(output.shape),
        output_dtype=output.dtype,
    )


def _count_flops(
    module: nn.Module, specs: Sequence[_Spec], dtype: torch.dtype
) -> tuple[float, float, Tensor]:
    """Forward and backward FLOPs, attention pinned to SDPA's math path (FlopCounterMode counts it)."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        state = _fresh_state(module)
        args = [_make_input(spec, dtype) for spec in specs]
        with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            output = _call(module, state, args)
            forward = counter.get_total_flops()
            if output.requires_grad:
                torch.autograd.backward(output, torch.ones_like(output))
            total = counter.get_total_flops()
    return float(forward), float(total - forward), output


def _count_saved_elements(module: nn.Module, specs: Sequence[_Spec], dtype: torch.dtype) -> float:
    """Elements of the distinct storages autograd saves, with the attention kernel CPU picks."""
    saved: list[Tensor] = []

    def keep(t: Tensor) -> Tensor:
        saved.append(t)
        return t

    with FakeTensorMode(allow_non_fake_inputs=True):
        state = _fresh_state(module)
        args = [_make_input(spec, dtype) for spec in specs]
        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            _call(module, state, args)
    weights = {_storage_id(t) for t in state.values()}
    storages = {
        _storage_id(t): t.untyped_storage().nbytes() // t.element_size()
        for t in saved
        if _storage_id(t) not in weights
    }
    return float(sum(storages.values()))


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


def _call(module: nn.Module, state: dict[str, Tensor], args: list[Tensor]) -> Tensor:
    output = functional_call(module, state, tuple(args))
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


def _per_sample(run: _Run, params: int, batch_size: int) -> PartCost:
    return PartCost(
        forward_flops=run.forward_flops / batch_size,
        backward_flops=run.backward_flops / batch_size,
        params=params,
        saved_elements=run.saved_elements / batch_size,
    )


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count
