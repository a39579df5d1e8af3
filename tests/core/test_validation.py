"""Bad configs are refused before anything runs, each with one message naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from collapipe_core.validation import ConfigError, load_config, parse_config
from tests.core.builders import tiny_config


def _base() -> dict[str, Any]:
    return tiny_config().model_dump(mode="json", by_alias=True)


def _with(path: str, value: Any) -> dict[str, Any]:
    data = _base()
    *parents, leaf = path.split(".")
    node = data
    for key in parents:
        node = node[key]
    node[leaf] = value
    return data


BAD = [
    ("channel.bandwidth_hz", -5.0, "greater than 0"),
    ("network.devices_per_cluster", 0, "greater than or equal to 1"),
    ("scheduler.segments", [2, 1, 1, 1], "one entry per device"),
    ("scheduler.segments", [3, 2, 1], "sum to model.num_encoder_blocks = 4"),
    ("scheduler.policy", "best-guess", "unknown policy 'best-guess'"),
    ("data.dataset", "imagenet", "unknown dataset"),
    ("training.microbatch_size", 1000, "larger than a cluster's data"),
    ("model.num_heads", 3, "must divide d_model"),
    ("executor", "quantum", "'simulated' or 'distributed'"),
    ("training.schedule", "zigzag", "'gpipe' or '1f1b'"),
    ("network.memory_bytes", {"low": 1000, "high": 2000}, "cannot hold the encoder in any placement"),
    ("network.cpu_hz", {"low": 3e9, "high": 1e9}, "must not exceed high"),
    ("data.dataset", "cmudict", "seq2seq dataset but model.kind is classifier"),
    ("model.colour", "blue", "unknown field"),
    ("scheduler.num_microbatches", 40, "M·b = 160 exceeds a cluster's data"),
]


@pytest.mark.parametrize(("field", "value", "reason"), BAD, ids=[f"{f}={v}" for f, v, _ in BAD])
def test_bad_config_is_refused_with_the_field_and_reason(field: str, value: Any, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(_with(field, value))
    problems = info.value.problems
    assert len(problems) == 1, problems
    assert problems[0].field.startswith(field.split(".")[0])
    assert field in problems[0].field or problems[0].field in field
    assert reason in problems[0].message


def test_memory_refusal_names_device_and_shortfall() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(_with("network.memory_bytes", {"low": 1000, "high": 2000}))
    message = str(info.value)
    assert "short by" in message and "MiB" in message and "c0-d" in message


def test_too_little_data_names_the_field() -> None:
    data = _with("data.dataset", "django-langid")
    data["data"]["samples_per_cluster"] = 100_000
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert [p.field for p in info.value.problems] == ["data.samples_per_cluster"]
    assert "usable samples" in info.value.problems[0].message


def test_yaml_exponent_numbers_are_numbers(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_base()) + "channel: {bandwidth_hz: 2e7}\n")
    assert load_config(path).channel.bandwidth_hz == 2e7


def test_load_config_reads_yaml_and_applies_overrides(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_base()))
    config = load_config(
        path, {"training.rounds": 2, "scheduler.policy": "fixed", "scheduler.segments": [1, 2, 1]}
    )
    assert config.training.rounds == 2 and config.scheduler.segments == [1, 2, 1]


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the config"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("network: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


@pytest.mark.parametrize("name", ["quickstart", "paper-transformer", "paper-bert"])
def test_shipped_examples_are_valid(name: str) -> None:
    config = load_config(Path(__file__).parents[2] / "examples" / f"{name}.yaml")
    assert config.name
