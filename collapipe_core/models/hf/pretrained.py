"""Local pretrained directories: refused unless local, and the CollaPipe sizes their config.json implies.

``model.pretrained_path`` names a directory written by ``save_pretrained`` (config.json and safetensors
weights). CollaPipe never downloads: a Hub name ("gpt2"), a URL, a missing directory or one without a
config.json is refused with a ``ValueError`` naming ``model.pretrained_path``, the value and why
(:func:`checked_pretrained_dir`), before transformers sees the path.

:func:`pretrained_sizes` reads config.json as JSON only (no transformers import, no code from the
directory) and returns the size fields it implies, so validation can compare them with the config:
d_model, num_heads, num_kv_heads (llama), ffn_dim, num_blocks, num_decoder_layers (bart), vocab_size,
max_positions (≥ seq_len, and ≥ target_len for bart). A key missing from config.json takes its
config class's default (:data:`DEFAULTS`, checked against transformers by the tests); GPT-2's
``n_inner: null`` means 4·d and LLaMA's ``num_key_value_heads: null`` means num_heads.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIELD = "model.pretrained_path"

SIZE_KEYS: dict[str, dict[str, tuple[str, ...]]] = {
    "bert": {
        "d_model": ("hidden_size",),
        "num_heads": ("num_attention_heads",),
        "ffn_dim": ("intermediate_size",),
        "num_blocks": ("num_hidden_layers",),
        "vocab_size": ("vocab_size",),
        "max_positions": ("max_position_embeddings",),
    },
    "bart": {
        "d_model": ("d_model",),
        "num_heads": ("encoder_attention_heads", "decoder_attention_heads"),
        "ffn_dim": ("encoder_ffn_dim", "decoder_ffn_dim"),
        "num_blocks": ("encoder_layers",),
        "num_decoder_layers": ("decoder_layers",),
        "vocab_size": ("vocab_size",),
        "max_positions": ("max_position_embeddings",),
    },
    "gpt2": {
        "d_model": ("n_embd",),
        "num_heads": ("n_head",),
        "ffn_dim": ("n_inner",),
        "num_blocks": ("n_layer",),
        "vocab_size": ("vocab_size",),
        "max_positions": ("n_positions",),
    },
    "llama": {
        "d_model": ("hidden_size",),
        "num_heads": ("num_attention_heads",),
        "num_kv_heads": ("num_key_value_heads",),
        "ffn_dim": ("intermediate_size",),
        "num_blocks": ("num_hidden_layers",),
        "vocab_size": ("vocab_size",),
        "max_positions": ("max_position_embeddings",),
    },
}
"""Per architecture: CollaPipe size field -> the config-class keys it sets (the first one is read back)."""

DEFAULTS: dict[str, dict[str, int | None]] = {
    "bert": {
        "hidden_size": 768,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "num_hidden_layers": 12,
        "vocab_size": 30522,
        "max_position_embeddings": 512,
    },
    "bart": {
        "d_model": 1024,
        "encoder_attention_heads": 16,
        "encoder_ffn_dim": 4096,
        "encoder_layers": 12,
        "decoder_layers": 12,
        "vocab_size": 50265,
        "max_position_embeddings": 1024,
    },
    "gpt2": {
        "n_embd": 768,
        "n_head": 12,
        "n_inner": None,
        "n_layer": 12,
        "vocab_size": 50257,
        "n_positions": 1024,
    },
    "llama": {
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": None,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "vocab_size": 32000,
        "max_position_embeddings": 2048,
    },
}
"""The config classes' defaults of the keys in :data:`SIZE_KEYS` (transformers 5.23)."""

_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


@dataclass(frozen=True)
class PretrainedSizes:
    """What a pretrained directory's config.json says about the sizes CollaPipe configures."""

    architecture: str  # bert | bart | gpt2 | llama (config.json's model_type)
    d_model: int
    num_heads: int
    num_kv_heads: int | None  # llama only
    ffn_dim: int
    num_blocks: int  # the split layers: bert/bart encoder layers, gpt2/llama decoder layers
    num_decoder_layers: int | None  # bart only
    vocab_size: int
    max_positions: int  # learned positions (rope for llama): seq_len (and bart's target_len) must fit


def looks_like_hub_name(text: str) -> bool:
    """``gpt2``, ``meta-llama/Llama-2-7b-hf``: what a user who expects a download would write."""
    return bool(_HUB_NAME.match(text)) and not text.startswith(".")


def checked_pretrained_dir(path: str | os.PathLike[str]) -> Path:
    """``path`` as a local directory holding a config.json; a ValueError saying why it is not one."""
    text = os.fspath(path)
    why = ""
    if "://" in text or text.startswith(("hf:", "www.")):
        why = "is a URL; CollaPipe never downloads models"
    elif not os.path.exists(text):
        why = "does not exist"
        if looks_like_hub_name(text):
            why += (
                " (it looks like a Hugging Face Hub name: CollaPipe never downloads models; "
                "save the model with save_pretrained into a local directory and give that path)"
            )
    elif not os.path.isdir(text):
        why = "is a file, not a directory written by save_pretrained"
    elif not os.path.isfile(os.path.join(text, "config.json")):
        why = "has no config.json; give a directory written by save_pretrained"
    if why:
        raise ValueError(f"{FIELD} {text!r} {why}")
    return Path(text)


def read_config_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed config.json of a checked pretrained directory (JSON only, nothing executed)."""
    directory = checked_pretrained_dir(path)
    try:
        data = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{FIELD} {os.fspath(path)!r}: config.json is not readable JSON ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{FIELD} {os.fspath(path)!r}: config.json is not a JSON object")
    return data


def architecture_of(config_json: dict[str, Any], path: str | os.PathLike[str]) -> str:
    """config.json's ``model_type`` when it is one of the families CollaPipe splits."""
    model_type = config_json.get("model_type")
    if model_type not in SIZE_KEYS:
        raise ValueError(
            f"{FIELD} {os.fspath(path)!r}: config.json's model_type is {model_type!r}; CollaPipe splits "
            f"{', '.join(SIZE_KEYS)}"
        )
    return str(model_type)


def pretrained_sizes(path: str | os.PathLike[str]) -> PretrainedSizes:
    """The architecture and size fields the config.json of directory ``path`` implies."""
    config_json = read_config_json(path)
    arch = architecture_of(config_json, path)
    keys, defaults = SIZE_KEYS[arch], DEFAULTS[arch]

    def read(field: str) -> int | None:
        if field not in keys:
            return None
        key = keys[field][0]
        value = config_json.get(key, defaults[key])
        optional = defaults[key] is None  # GPT-2's n_inner, LLaMA's num_key_value_heads
        if (value is None and not optional) or isinstance(value, bool) or not isinstance(value, int | None):
            raise ValueError(f"{FIELD} {os.fspath(path)!r}: config.json's {key} is {value!r}, not an integer")
        return value

    def need(field: str) -> int:
        value = read(field)
        assert value is not None  # every key that may be null is read with read()
        return value

    d_model, num_heads = need("d_model"), need("num_heads")
    ffn_dim, num_kv_heads = read("ffn_dim"), read("num_kv_heads")
    return PretrainedSizes(
        architecture=arch,
        d_model=d_model,
        num_heads=num_heads,
        num_kv_heads=(num_kv_heads or num_heads) if arch == "llama" else None,
        ffn_dim=4 * d_model if ffn_dim is None else ffn_dim,  # GPT-2's n_inner: null
        num_blocks=need("num_blocks"),
        num_decoder_layers=read("num_decoder_layers"),
        vocab_size=need("vocab_size"),
        max_positions=need("max_positions"),
    )
