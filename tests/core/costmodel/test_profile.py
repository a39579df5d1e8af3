"""The profile is measured from the real modules, agrees with the closed form and is cached."""

from __future__ import annotations

from typing import Any

import pytest

from collapipe_core.config import ExperimentConfig, ModelConfig
from collapipe_core.costmodel import build_profile
from collapipe_core.costmodel.profile import closed_form_profile, profile_cache_info
from collapipe_core.models import build_model, build_skeleton
from tests.core.builders import tiny_config

QUICKSTART = {
    "d_model": 64,
    "num_heads": 4,
    "ffn_dim": 256,
    "seq_len": 16,
    "target_len": 16,
    "num_blocks": 4,
    "num_decoder_layers": 1,
}


def _numel(module) -> int:  # type: ignore[no-untyped-def]
    return sum(p.numel() for p in module.parameters())


def _config(kind: str, **model: Any) -> ExperimentConfig:
    dataset = "synthetic-reverse" if kind == "seq2seq" else "synthetic-parity"
    return tiny_config(model={"kind": kind, **model}, data={"dataset": dataset})


@pytest.mark.parametrize("kind", ["seq2seq", "classifier"])
def test_parameter_counts_match_the_torch_modules(kind: str) -> None:
    config = _config(kind, num_decoder_layers=2, target_len=10, ffn_dim=40)
    profile = build_profile(config, src_vocab=23, tgt_size=17)
    model = build_model(config.model, 23, 17, seed=0)
    assert profile.embedding_params == _numel(model.embedding)
    assert profile.block_params == _numel(model.blocks[0])
    assert profile.encoder_params == sum(_numel(b) for b in model.blocks)
    assert profile.head_params == _numel(model.head)
    assert profile.total_params == _numel(model)


@pytest.mark.parametrize(
    ("kind", "model"),
    [
        ("seq2seq", QUICKSTART),
        ("classifier", QUICKSTART),
        ("seq2seq", {"d_model": 48, "num_heads": 6, "ffn_dim": 72, "seq_len": 20, "target_len": 7}),
        ("seq2seq", {"num_decoder_layers": 3, "target_len": 12, "seq_len": 9}),
        ("classifier", {"d_model": 40, "num_heads": 5, "ffn_dim": 100, "seq_len": 30, "vocab_size": 50}),
    ],
)
def test_the_measured_profile_agrees_with_the_closed_form(kind: str, model: dict[str, Any]) -> None:
    config = _config(kind, **model)
    measured = build_profile(config, 23, 17)
    closed = closed_form_profile(config, 23, 17)
    for field in ("embedding_params", "block_params", "head_params", "total_params"):
        assert getattr(measured, field) == getattr(closed, field), field
    for field in ("block_forward_flops", "block_backward_flops", "head_forward_flops", "head_backward_flops"):
        assert getattr(measured, field) == pytest.approx(getattr(closed, field), rel=0.01), field
    # what autograd keeps in a TEB: s·(8d + 2f + h + 5) elements (profile docstring, term by term)
    assert measured.block_activation_bytes == closed.block_activation_bytes
    assert measured.block_activation_fixed_bytes == 0
    # recomputed: its inputs kept, the forward again but the last product in backward
    assert measured.block_recompute_activation_bytes == closed.block_recompute_activation_bytes
    assert measured.block_recompute_backward_flops == pytest.approx(
        closed.block_recompute_backward_flops, rel=0.01
    )
    assert measured.payload_bytes == closed.payload_bytes
    # the closed form's 2·s·d for the embedding's position add is modeled, not measured: no matmul
    assert measured.embedding_forward_flops == measured.embedding_backward_flops == 0


def test_block_flops_are_24sd2_plus_4s2d_for_a_4d_ffn() -> None:
    config = tiny_config(model={"d_model": 32, "ffn_dim": 128, "seq_len": 10, "num_heads": 4})
    profile = build_profile(config, 30, 2)
    s, d = 10, 32
    assert profile.block_forward_flops == 24 * s * d * d + 4 * s * s * d
    assert profile.block_backward_flops == 2 * profile.block_forward_flops
    assert profile.payload_bytes == s * d * 4


def test_optimizer_state_changes_the_per_block_state_bytes() -> None:
    sgd = build_profile(tiny_config(training={"optimizer": "sgd"}), 30, 2)
    adam = build_profile(tiny_config(training={"optimizer": "adamw"}), 30, 2)
    assert adam.block_state_bytes == 2 * sgd.block_state_bytes  # (w + g + m + v) vs (w + g)


def test_bf16_halves_the_payload_and_keeps_trainable_state_in_fp32() -> None:
    fp32 = build_profile(tiny_config(), 30, 2)
    bf16 = build_profile(tiny_config(training={"precision": "bf16"}), 30, 2)
    assert bf16.payload_bytes == fp32.payload_bytes / 2  # the stages' boundary dtype
    # every weight trains: fp32 master weights, gradients and optimizer state whatever the precision
    assert bf16.block_state_bytes == fp32.block_state_bytes
    # autocast keeps the matrix products' inputs in bf16; norms' statistics and masks stay as they were
    assert fp32.block_activation_bytes / 2 < bf16.block_activation_bytes < fp32.block_activation_bytes
    assert bf16.block_forward_flops == fp32.block_forward_flops


def test_lora_trains_only_the_adapters_and_stores_the_frozen_base_at_the_precision() -> None:
    d, r = 32, 4
    lora = {"peft": {"r": r, "target_modules": ["qkv", "out"]}, "precision": "bf16", "optimizer": "adamw"}
    full = build_profile(tiny_config(model={"d_model": d, "num_heads": 4}), 30, 2)
    adapted = build_profile(tiny_config(model={"d_model": d, "num_heads": 4}, training=lora), 30, 2)
    adapters = r * (d + 3 * d) + r * (d + d)  # qkv: A r×d, B 3d×r; out: A r×d, B d×r
    assert adapted.block_trainable_params == adapters
    assert adapted.block_params == full.block_params + adapters
    frozen = full.block_params
    assert adapted.block_weight_bytes == 2 * frozen + 4 * adapters  # the base in bf16, adapters fp32
    # weights as stored + the adapters' fp32 gradients and AdamW's two moments
    assert adapted.block_state_bytes == 2 * frozen + 4 * adapters * (1 + 1 + 2)
    assert adapted.block_update_bits == 8 * 4 * adapters  # only what trains crosses FedAvg
    assert adapted.block_frozen_bits == 8 * 2 * frozen  # sent to a device that gains the block
    # frozen weights get no weight gradient: backward is measured smaller than full training's
    assert adapted.block_backward_flops < full.block_backward_flops


def test_a_second_call_is_served_from_the_cache() -> None:
    shape = {"d_model": 24, "num_heads": 3, "ffn_dim": 40}
    config = tiny_config(model=shape)
    deeper = tiny_config(model={**shape, "num_blocks": 9})
    sgd = tiny_config(model=shape, training={"optimizer": "sgd"})
    first = build_profile(config, 31, 5)  # vocabulary sizes no other test uses: measured here
    before = profile_cache_info()
    assert build_profile(config, 31, 5) == first
    # L and the optimizer scale the measurement: the cache serves them too
    assert build_profile(deeper, 31, 5).block_forward_flops == first.block_forward_flops
    assert build_profile(sgd, 31, 5).block_state_bytes == first.block_state_bytes / 2
    after = profile_cache_info()
    assert (after.hits - before.hits, after.misses - before.misses) == (3, 0)
    build_profile(config, 31, 6)  # another class count changes the head: measured again
    assert profile_cache_info().misses == after.misses + 1


def _transformers(architecture: str, **model: Any) -> ExperimentConfig:
    fields = {"source": "transformers", "architecture": architecture, "d_model": 32, "num_heads": 4, **model}
    return tiny_config().model_copy(update={"model": ModelConfig.model_validate(fields)})


def test_a_transformers_model_is_measured_from_its_skeleton() -> None:
    config = _transformers("llama", num_kv_heads=2, ffn_dim=48, num_blocks=3, seq_len=10, vocab_size=50)
    profile = build_profile(config, 40, 40)
    s, d, f, d_kv = 10, 32, 48, 16
    assert profile.block_forward_flops == 2 * s * (2 * d * d + 2 * d * d_kv + 3 * d * f) + 4 * s * s * d
    assert profile.total_params == _numel(build_skeleton(config.model, 40, 40))
    assert profile.embedding_params == 50 * d  # model.vocab_size rows


def test_the_closed_form_covers_the_builtin_models_only() -> None:
    with pytest.raises(ValueError, match="builtin only"):
        closed_form_profile(_transformers("gpt2"), 100, 100)


@pytest.mark.parametrize("architecture", ["builtin", "gpt2", "llama"])
def test_the_modeled_upload_is_what_fedavg_exchanges(architecture: str) -> None:
    """B (a TEB's bits across FedAvg) and the CU's upload U are the trainable tensors FedAvg averages in a
    real model with LoRA and bf16 (federated.exchange counts them on the built model)."""
    from collapipe_core.federated.exchange import upload_bytes

    lora = {"peft": {"r": 4}, "precision": "bf16"}
    if architecture == "builtin":
        config = tiny_config(model={"d_model": 32, "num_heads": 4}, training=lora)
    else:
        base = _transformers(architecture, ffn_dim=48, num_blocks=3, seq_len=10, vocab_size=50).model_dump()
        config = ExperimentConfig.model_validate({**base, "training": {**base["training"], **lora}})
    profile = build_profile(config, 40, 2 if config.model.kind == "classifier" else 40)
    model = build_model(
        config.model,
        40,
        2 if config.model.kind == "classifier" else 40,
        seed=0,
        peft=config.training.peft,
        precision="bf16",
    )
    exchanged = upload_bytes(model)
    assert exchanged.blocks == (profile.block_update_bits / 8,) * config.model.num_blocks
    assert profile.update_bits / 8 == exchanged.embedding + sum(exchanged.blocks)  # U: embedding and TEBs
    frozen = sum(p.numel() * p.element_size() for p in model.blocks[0].parameters() if not p.requires_grad)
    assert profile.block_frozen_bits / 8 == frozen  # the base in bf16, sent to a device that gains the TEB
