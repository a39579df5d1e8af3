"""The measurement counts what real CPU runs keep, for builtin and Hugging Face blocks, with no weights."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from collapipe_core.config import ModelConfig
from collapipe_core.costmodel.measure import MeasuredParts, measure_model, measure_parts
from collapipe_core.models import EncoderBlock, build_model, build_skeleton
from tests.core.builders import tiny_config

MiB = 2**20
VOCAB, CLASSES = 29, 3

HF_SIZES: dict[str, dict[str, Any]] = {
    "bert": {"num_heads": 2},
    "bart": {"num_heads": 2, "num_decoder_layers": 2, "target_len": 11},
    "gpt2": {"num_heads": 2},
    "llama": {"num_heads": 4, "num_kv_heads": 2},
}


def _hf(architecture: str, **fields: Any) -> ModelConfig:
    sizes = {"d_model": 16, "ffn_dim": 24, "num_blocks": 3, "seq_len": 9, **HF_SIZES[architecture]}
    return ModelConfig.model_validate(
        {"source": "transformers", "architecture": architecture, **sizes, **fields}
    )


def _outputs(model_cfg: ModelConfig) -> int:
    return CLASSES if model_cfg.kind == "classifier" else VOCAB


def _real_saved_elements(run: Callable[[], Tensor], module: nn.Module) -> int:
    """Elements of the distinct storages a real CPU forward saves for backward, weights excluded."""
    saved: list[Tensor] = []

    def keep(t: Tensor) -> Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        run()
    weights = {t.untyped_storage().data_ptr() for t in [*module.parameters(), *module.buffers()]}
    storages = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() // t.element_size()
        for t in saved
        if t.untyped_storage().data_ptr() not in weights
    }
    return sum(storages.values())


def _real_block_saved_elements(block: nn.Module, seq_len: int, d_model: int, padded: int) -> int:
    h = torch.zeros(1, seq_len, d_model, requires_grad=True)
    mask = torch.ones(1, seq_len, dtype=torch.bool)
    mask[:, seq_len - padded :] = False
    return _real_saved_elements(lambda: block(h, mask), block)


def _builtin_parts(d: int, num_heads: int, f: int, dropout: float, seq_len: int) -> MeasuredParts:
    config = tiny_config(
        model={"d_model": d, "num_heads": num_heads, "ffn_dim": f, "dropout": dropout, "seq_len": seq_len}
    )
    return measure_model(config.model, 23, 2)


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_a_builtin_block_keeps_what_a_real_cpu_run_keeps(dropout: float) -> None:
    s, d, f = 12, 32, 48
    measured = _builtin_parts(d, 4, f, dropout, s)
    real = EncoderBlock(d, 4, f, dropout)
    assert measured.block.saved_elements == _real_block_saved_elements(real, s, d, padded=3)
    # the math path (meta, or CPU with dropout) would keep the 2·h·s² scores and probabilities
    assert dropout > 0 or measured.block.saved_elements == s * (8 * d + 2 * f + 4 + 5)


@pytest.mark.parametrize("architecture", sorted(HF_SIZES))
def test_a_hugging_face_block_keeps_what_a_real_cpu_run_keeps(architecture: str) -> None:
    cfg = _hf(architecture)
    measured = measure_model(cfg, VOCAB, _outputs(cfg))
    block = build_model(cfg, VOCAB, _outputs(cfg), seed=0).blocks[0]
    for padded in (0, 2):
        assert measured.block.saved_elements == _real_block_saved_elements(block, 9, 16, padded)


def test_llama_flops_follow_the_architecture_and_the_parameters_the_model() -> None:
    cfg = _hf("llama", d_model=64, ffn_dim=160, seq_len=16)
    parts = measure_model(cfg, VOCAB, VOCAB)
    s, d, f, d_kv = 16, 64, 160, 64 // 4 * 2  # two key/value heads of four
    assert parts.block.forward_flops == 2 * s * (2 * d * d + 2 * d * d_kv + 3 * d * f) + 4 * s * s * d
    assert parts.block.backward_flops == 2 * parts.block.forward_flops
    assert parts.head.forward_flops == 2 * s * d * VOCAB  # the LM head; RMSNorm has no product
    assert parts.embedding.forward_flops == parts.embedding.backward_flops == 0  # lookups only
    model = build_skeleton(cfg, VOCAB, VOCAB)
    assert parts.block.params == sum(p.numel() for p in model.blocks[0].parameters())
    assert parts.embedding.params + 3 * parts.block.params + parts.head.params == sum(
        p.numel() for p in model.parameters()
    )
    assert parts.payload_elements == s * d


@pytest.mark.parametrize(("architecture", "tied"), [("gpt2", {}), ("llama", {"tie_word_embeddings": True})])
def test_a_tied_lm_head_is_counted_once_on_the_embedding(architecture: str, tied: dict[str, Any]) -> None:
    cfg = _hf(architecture, hf_config=tied)
    parts = measure_model(cfg, VOCAB, VOCAB)
    model = build_skeleton(cfg, VOCAB, VOCAB)
    head_only = {id(p) for p in model.head.parameters()} - {id(p) for p in model.embedding.parameters()}
    assert len(head_only) < len(list(model.head.parameters()))  # the LM head is the token table
    assert parts.head.params == sum(p.numel() for p in model.head.parameters() if id(p) in head_only)
    assert parts.head.forward_flops >= 2 * 9 * 16 * VOCAB  # the tied head still computes
    total = parts.embedding.params + 3 * parts.block.params + parts.head.params
    assert total == sum(p.numel() for p in model.parameters())


def test_per_sample_costs_do_not_depend_on_the_batch_measured() -> None:
    config = tiny_config(model={"kind": "seq2seq", "target_len": 10}, data={"dataset": "synthetic-reverse"})
    skeleton = build_skeleton(config.model, 23, 17)
    one, three = (
        measure_parts(skeleton.embedding, skeleton.blocks[0], skeleton.head, 12, 10, batch_size=b)
        for b in (1, 3)
    )
    assert one.block == three.block
    assert one.payload_elements == three.payload_elements
    for a, b in ((one.embedding, three.embedding), (one.head, three.head)):
        assert (a.forward_flops, a.backward_flops, a.params) == (b.forward_flops, b.backward_flops, b.params)
    # the position indices, (s,) and (T,), are kept once per micro-batch: batch 1 counts them per sample
    assert one.embedding.saved_elements - three.embedding.saved_elements == pytest.approx(12 * (1 - 1 / 3))
    assert one.head.saved_elements - three.head.saved_elements == pytest.approx(10 * (1 - 1 / 3))


def test_measuring_leaves_the_modules_untouched() -> None:
    skeleton = build_skeleton(tiny_config().model, 23, 2)
    measure_parts(skeleton.embedding, skeleton.blocks[0], skeleton.head, 12)
    assert all(p.is_meta and p.grad is None for p in skeleton.parameters())


def test_a_block_that_changes_the_shape_of_h_is_refused() -> None:
    skeleton = build_skeleton(tiny_config().model, 23, 2)

    class Widening(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.widen = nn.Linear(16, 24, device="meta")

        def forward(self, h: Tensor, src_mask: Tensor) -> Tensor:
            out: Tensor = self.widen(h)
            return out

    with pytest.raises(ValueError, match="keep the shape of h"):
        measure_parts(skeleton.embedding, Widening(), skeleton.head, seq_len=8)


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


def test_a_llama_7b_shaped_profile_is_measured_without_allocating_its_weights() -> None:
    from collapipe_core.costmodel import build_profile
    from collapipe_core.models.hf import family

    family("llama")  # imports transformers before the step: its import is not the step's memory
    s, d, f, v, layers = 512, 4096, 11008, 32000, 32
    model = {
        "d_model": d,
        "num_heads": 32,
        "num_kv_heads": 32,
        "ffn_dim": f,
        "num_blocks": layers,
        "seq_len": s,
    }
    config = tiny_config(training={"optimizer": "adamw", "precision": "bf16"}).model_copy(
        update={"model": _hf("llama", **model, vocab_size=v)}
    )
    base_kib = _status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    profile = build_profile(config, v, v)
    peak_kib = _status_kib("VmHWM")

    assert profile.total_params == 6_738_415_616  # LLaMA-2-7B: 13.5 GB of bf16 weights
    assert profile.block_forward_flops == 2 * s * (4 * d * d + 3 * d * f) + 4 * s * s * d  # 211.5 GFLOP
    assert profile.head_forward_flops == 2 * s * d * v
    assert profile.payload_bytes == s * d * 2
    step_bytes = (peak_kib - base_kib) * 1024
    print(
        f"\nLLaMA-7B-shaped profile: {profile.total_params:,} params; per sample: block forward "
        f"{profile.block_forward_flops / 1e9:.1f} GFLOP, backward {profile.block_backward_flops / 1e9:.1f} "
        f"GFLOP, head forward {profile.head_forward_flops / 1e9:.1f} GFLOP, block activations "
        f"{profile.block_activation_bytes / MiB:.1f} MiB (bf16), payload {profile.payload_bytes / MiB:.1f} "
        f"MiB; peak RSS {peak_kib / 1024:.0f} MiB, {step_bytes / MiB:+.1f} MiB over the "
        f"{base_kib / 1024:.0f} MiB before the step"
    )
    assert step_bytes < 2**30  # far less than the 13.5 GB of weights
