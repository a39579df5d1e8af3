"""Local pretrained directories: loaded exactly, refused unless local, never a network connection."""

from __future__ import annotations

import dataclasses
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from collapipe_core.models import build_model, build_skeleton
from collapipe_core.models.hf import HfSplitModel, checked_pretrained_dir, pretrained_sizes
from collapipe_core.models.hf.build import family
from collapipe_core.models.hf.pretrained import DEFAULTS, MAX_CONFIG_JSON_BYTES, SIZE_KEYS, PretrainedSizes
from tests.core.models.hf.tiny import ARCHITECTURES, VOCAB, hf_config, num_outputs


def build(architecture: str, seed: int = 1, **kwargs: Any) -> HfSplitModel:
    cfg = hf_config(architecture, **kwargs.pop("overrides", {}))
    model = build_model(cfg, VOCAB, num_outputs(architecture), seed, pad_id=0, **kwargs)
    assert isinstance(model, HfSplitModel)
    return model


def saved(architecture: str, directory: Path) -> HfSplitModel:
    model = build(architecture)
    model.hf_model.save_pretrained(directory)
    return model


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Every attempt to open a connection is recorded and fails; the HF offline switches are on."""
    attempts: list[object] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(args)
        raise OSError("network access attempted in a test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    yield attempts
    assert attempts == []


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_a_saved_model_loads_with_its_weights_and_no_connection(
    architecture: str, tmp_path: Path, no_network: list[object]
) -> None:
    original = saved(architecture, tmp_path).state_dict()
    loaded = build(architecture, seed=99, pretrained_dir=tmp_path)  # the seed must not matter
    assert loaded.training
    state = loaded.state_dict()
    assert state.keys() == original.keys()
    for name, tensor in original.items():
        assert torch.equal(state[name], tensor), name
    skeleton = build_skeleton(
        hf_config(architecture), VOCAB, num_outputs(architecture), pad_id=0, pretrained_dir=tmp_path
    )
    assert {k: t.shape for k, t in skeleton.state_dict().items()} == {k: t.shape for k, t in state.items()}


def test_model_pretrained_path_is_the_default_directory(tmp_path: Path) -> None:
    original = saved("gpt2", tmp_path)
    loaded = build("gpt2", overrides={"pretrained_path": str(tmp_path)})
    assert torch.equal(loaded.embedding.wte.weight, original.embedding.wte.weight)
    assert loaded.embedding.wte.weight is loaded.head.lm_head.weight  # still tied after loading


def bad_paths(tmp_path: Path) -> dict[str, tuple[str, str]]:
    (tmp_path / "file.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    return {
        "hub name": ("gpt2", "does not exist .*Hugging Face Hub name.*never downloads"),
        "hub repo": ("openai-community/gpt2", "does not exist .*Hub name"),
        "url": ("https://huggingface.co/gpt2", "is a URL; CollaPipe never downloads models"),
        "missing": (str(tmp_path / "missing"), "does not exist"),
        "file": (str(tmp_path / "file.json"), "is a file, not a directory"),
        "no config": (str(tmp_path / "empty"), "has no config.json"),
    }


@pytest.mark.parametrize("case", ["hub name", "hub repo", "url", "missing", "file", "no config"])
def test_anything_but_a_local_saved_directory_is_refused_without_a_connection(
    case: str, tmp_path: Path, no_network: list[object]
) -> None:
    path, why = bad_paths(tmp_path)[case]
    message = rf"model.pretrained_path '{path}' {why}"
    with pytest.raises(ValueError, match=message):
        checked_pretrained_dir(path)
    with pytest.raises(ValueError, match=message):
        build("gpt2", pretrained_dir=path)
    with pytest.raises(ValueError, match=message):
        build("gpt2", overrides={"pretrained_path": path})
    with pytest.raises(ValueError, match=message):
        build_skeleton(hf_config("gpt2", pretrained_path=path), VOCAB, VOCAB, pad_id=0)


def test_weights_only_as_a_pickle_are_refused(tmp_path: Path) -> None:
    model = build("gpt2")
    model.hf_model.save_pretrained(tmp_path, safe_serialization=True)
    (tmp_path / "model.safetensors").rename(tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match=rf"model.pretrained_path '{tmp_path}' could not be loaded"):
        build("gpt2", pretrained_dir=tmp_path)


def test_a_directory_of_another_family_is_refused(tmp_path: Path) -> None:
    saved("gpt2", tmp_path)
    with pytest.raises(ValueError, match=r"holds a gpt2 model but model\.architecture is llama"):
        build("llama", pretrained_dir=tmp_path)


def test_a_data_vocabulary_larger_than_the_pretrained_embedding_is_refused(tmp_path: Path) -> None:
    saved("llama", tmp_path)
    with pytest.raises(ValueError, match=r"vocabulary \(40 ids\) does not fit the model's 29-row embedding"):
        build_model(hf_config("llama"), 40, 40, seed=0, pad_id=0, pretrained_dir=tmp_path)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_the_sizes_a_directory_implies_are_the_config_s(architecture: str, tmp_path: Path) -> None:
    saved(architecture, tmp_path)
    sizes = pretrained_sizes(tmp_path)
    assert sizes == PretrainedSizes(
        architecture=architecture,
        d_model=16,
        num_heads=4 if architecture == "llama" else 2,
        num_kv_heads=2 if architecture == "llama" else None,
        ffn_dim=24,
        num_blocks=3,
        num_decoder_layers=2 if architecture == "bart" else None,
        vocab_size=VOCAB,
        max_positions=11 if architecture == "bart" else 9,
    )


def test_missing_keys_take_the_config_class_defaults(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 48}))  # 12 heads
    sizes = pretrained_sizes(tmp_path)
    assert (sizes.d_model, sizes.ffn_dim, sizes.num_blocks, sizes.vocab_size) == (48, 192, 12, 50257)


def test_the_defaults_are_the_transformers_config_classes_defaults() -> None:
    import transformers

    classes = {"bert": "BertConfig", "bart": "BartConfig", "gpt2": "GPT2Config", "llama": "LlamaConfig"}
    for architecture, name in classes.items():
        fields = {f.name: f.default for f in dataclasses.fields(getattr(transformers, name))}
        assert DEFAULTS[architecture] == {key: fields[key] for key in DEFAULTS[architecture]}, architecture
        assert {keys[0] for keys in SIZE_KEYS[architecture].values()} == set(DEFAULTS[architecture])


@pytest.mark.parametrize(
    ("config_json", "message"),
    [
        ({"model_type": "t5"}, "config.json's model_type is 't5'; CollaPipe splits bert, bart, gpt2, llama"),
        ({"model_type": "bert", "hidden_size": "768"}, "config.json's hidden_size is '768', not an integer"),
        (
            {"model_type": "bert", "num_hidden_layers": None},
            "config.json.s num_hidden_layers is None, not an",
        ),
        ([1, 2], "config.json is not a JSON object"),
    ],
)
def test_config_json_that_does_not_describe_a_family_is_refused(
    config_json: object, message: str, tmp_path: Path
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config_json))
    with pytest.raises(ValueError, match=rf"model.pretrained_path '{tmp_path}': {message}"):
        pretrained_sizes(tmp_path)


def _config_json(tmp_path: Path, architecture: str, **keys: object) -> Path:
    """A config.json of the tiny ``architecture`` with ``keys`` replaced; returns its directory."""
    saved(architecture, tmp_path)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **keys}))
    return tmp_path


BAD_SIZES: list[tuple[str, dict[str, object], str]] = [
    (
        "bert",
        {"num_hidden_layers": 10**6},
        "num_hidden_layers is 1000000, outside what CollaPipe builds: model.num_blocks must be at most 1024",
    ),
    (
        "bert",
        {"hidden_size": -5},
        "hidden_size is -5, outside what CollaPipe builds: model.d_model must be at least 8",
    ),
    (
        "bert",
        {"num_attention_heads": 0},
        "num_attention_heads is 0, outside what CollaPipe builds: model.num_heads must be at least 1",
    ),
    (
        "bert",
        {"hidden_size": 10**40},
        f"hidden_size is {10**40}, outside what CollaPipe builds: model.d_model must be at most 16384",
    ),
    ("bert", {"hidden_size": 32.5}, "hidden_size is 32.5, not an integer"),
    ("bert", {"hidden_size": True}, "hidden_size is True, not an integer"),
    ("bert", {"hidden_size": 16, "num_attention_heads": 3}, "num_heads (3) must divide d_model (16)"),
    (
        "bert",
        {"vocab_size": 2**30},
        "vocab_size is 1073741824, outside what CollaPipe builds: model.vocab_size must be at most 16777216",
    ),
    (
        "bert",
        {"max_position_embeddings": 0},
        "max_position_embeddings is 0, outside what CollaPipe builds: positions must be at least 1",
    ),
    (
        "bert",
        {"intermediate_size": 0},
        "intermediate_size is 0, outside what CollaPipe builds: model.ffn_dim must be at least 1",
    ),
    (
        "bart",
        {"decoder_attention_heads": 0},
        "decoder_attention_heads is 0, outside what CollaPipe builds: model.num_heads must be at least 1",
    ),
    ("bart", {"decoder_attention_heads": 3}, "num_heads (3) must divide d_model (16)"),
    (
        "bart",
        {"decoder_layers": 65},
        "decoder_layers is 65, outside what CollaPipe builds: model.num_decoder_layers must be at most 64",
    ),
    ("llama", {"num_key_value_heads": 3}, "num_kv_heads (3) must divide num_heads (4)"),
    (
        "gpt2",
        {"n_inner": -1},
        "n_inner is -1, outside what CollaPipe builds: model.ffn_dim must be at least 1",
    ),
]


@pytest.mark.parametrize(
    ("architecture", "keys", "message"), BAD_SIZES, ids=[str(keys) for _, keys, _ in BAD_SIZES]
)
def test_sizes_outside_the_config_s_bounds_are_refused_before_transformers_sees_them(
    architecture: str, keys: dict[str, object], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = _config_json(tmp_path, architecture, **keys)
    fam = family(architecture)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("transformers was given the checkpoint's config")

    monkeypatch.setattr(fam.config_class, "from_pretrained", refuse)
    monkeypatch.setattr(fam.config_class, "from_dict", refuse)
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        pretrained_sizes(directory, "checkpoints/tiny")
    assert str(error.value).startswith("model.pretrained_path 'checkpoints/tiny': config.json's ")
    assert str(tmp_path) not in str(error.value) and len(str(error.value)) < 500
    cfg = hf_config(architecture, pretrained_path="checkpoints/tiny")
    with pytest.raises(ValueError, match=re.escape(message)):
        build_skeleton(cfg, VOCAB, num_outputs(architecture), pad_id=0, pretrained_dir=directory)


def test_a_deeply_nested_or_oversized_config_json_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=r"config.json is nested deeper than"):
        pretrained_sizes(tmp_path, "ck")
    (tmp_path / "config.json").write_text('{"model_type": "bert", "hidden_size": ' + "9" * 5000 + "}")
    with pytest.raises(ValueError, match=r"config.json holds a number of more than 4300 digits"):
        pretrained_sizes(tmp_path, "ck")
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "bert", "pad": "x" * MAX_CONFIG_JSON_BYTES})
    )
    with pytest.raises(
        ValueError, match=r"config.json is 1.0 MiB; a checkpoint's config.json may be at most"
    ):
        pretrained_sizes(tmp_path, "ck")


def test_messages_name_the_config_s_path_never_the_resolved_one(tmp_path: Path) -> None:
    """A run's error is readable by every viewer: it names model.pretrained_path as the config wrote it."""
    model = build("gpt2")
    model.hf_model.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").rename(tmp_path / "pytorch_model.bin")  # weights only as a pickle
    cfg = hf_config("gpt2", pretrained_path="checkpoints/pickled")
    with pytest.raises(ValueError) as error:
        build_model(cfg, VOCAB, VOCAB, 0, pad_id=0, pretrained_dir=tmp_path)
    assert "model.pretrained_path 'checkpoints/pickled' could not be loaded" in str(error.value)
    assert str(tmp_path) not in str(error.value)
    (tmp_path / "config.json").unlink()
    with pytest.raises(ValueError) as error:
        checked_pretrained_dir(tmp_path, "checkpoints/pickled")
    assert str(error.value) == (
        "model.pretrained_path 'checkpoints/pickled' has no config.json; give a directory written by "
        "save_pretrained"
    )


@pytest.mark.parametrize(
    ("keys", "raised"),
    [
        ({"head_dim": 0}, "ZeroDivisionError"),
        ({"head_dim": -3}, "RuntimeError"),
        ({"hidden_act": "no"}, "KeyError"),
    ],
)
def test_whatever_transformers_raises_while_building_names_the_pretrained_path(
    keys: dict[str, object], raised: str, tmp_path: Path
) -> None:
    directory = _config_json(tmp_path, "llama", **keys)
    cfg = hf_config("llama", pretrained_path="checkpoints/odd")
    with pytest.raises(ValueError) as error:
        build_skeleton(cfg, VOCAB, VOCAB, pad_id=0, pretrained_dir=directory)
    message = str(error.value)
    assert message.startswith("model.pretrained_path 'checkpoints/odd': transformers cannot build")
    assert f"({raised}: " in message and str(tmp_path) not in message
    with pytest.raises(ValueError) as error:  # a run: named the same way, loading or building
        build_model(cfg, VOCAB, VOCAB, 0, pad_id=0, pretrained_dir=directory)
    assert str(error.value).startswith("model.pretrained_path 'checkpoints/odd'")
    assert str(tmp_path) not in str(error.value)
