"""The cost model counts the parameters the real torch modules have."""

from __future__ import annotations

import pytest

from collapipe_core.costmodel import build_profile
from collapipe_core.models import build_model
from tests.core.builders import tiny_config


def _numel(module) -> int:  # type: ignore[no-untyped-def]
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("kind", ["seq2seq", "classifier"])
def test_parameter_counts_match_the_torch_modules(kind: str) -> None:
    dataset = "synthetic-reverse" if kind == "seq2seq" else "synthetic-parity"
    config = tiny_config(
        model={"kind": kind, "num_decoder_layers": 2, "target_len": 10, "ffn_dim": 40},
        data={"dataset": dataset},
    )
    profile = build_profile(config, src_vocab=23, tgt_size=17)
    model = build_model(config.model, 23, 17, seed=0)
    assert profile.embedding_params == _numel(model.embedding)
    assert profile.block_params == _numel(model.blocks[0])
    assert profile.encoder_params == sum(_numel(b) for b in model.blocks)
    assert profile.head_params == _numel(model.head)
    assert profile.total_params == _numel(model)


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
