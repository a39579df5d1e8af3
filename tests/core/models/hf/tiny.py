"""Tiny configs of the four Hugging Face families (dropout 0, unequal sizes so mix-ups show)."""

from __future__ import annotations

from typing import Any

from collapipe_core.config import ModelConfig

VOCAB, NUM_CLASSES = 29, 3
ARCHITECTURES = ["bert", "bart", "gpt2", "llama"]
SIZES: dict[str, dict[str, Any]] = {
    "bert": {"num_heads": 2},
    "bart": {"num_heads": 2, "num_decoder_layers": 2, "target_len": 11},
    "gpt2": {"num_heads": 2},
    "llama": {"num_heads": 4, "num_kv_heads": 2},
}


def hf_config(architecture: str, **overrides: Any) -> ModelConfig:
    fields: dict[str, Any] = {
        "source": "transformers",
        "architecture": architecture,
        "d_model": 16,
        "ffn_dim": 24,
        "num_blocks": 3,
        "seq_len": 9,
        "dropout": 0.0,
        **SIZES[architecture],
        **overrides,
    }
    return ModelConfig.model_validate(fields)


def num_outputs(architecture: str) -> int:
    return NUM_CLASSES if architecture == "bert" else VOCAB
