"""Bad configs are refused before anything runs, each with one message naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from collapipe_core.scheduler import PolicyRegistry
from collapipe_core.validation import ConfigError, load_config, parse_config
from collapipe_core.workspace import Workspace
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
    ("scheduler.segments", [3, 2, 1], "sum to model.num_blocks = 4"),
    ("scheduler.policy", "best-guess", "policy 'best-guess' is not registered"),
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
    ("scheduler.gradient_noise_scale", 0.0, "positive number of samples"),
    ("scheduler.gradient_noise_scale", -3, "measure it with `collapipe calibrate CONFIG`"),
    ("scheduler.gradient_noise_scale", "12", "numbers are never text"),
    ("scheduler.convergence", "noise_scale", "needs scheduler.gradient_noise_scale"),
    ("scheduler.convergence", "loss", "'variance' or 'noise_scale'"),
    # strict types: what a YAML or JSON file says is what it means
    ("training.rounds", True, "valid integer"),
    ("training.rounds", 2.5, "a whole number, not 2.5"),
    ("training.rounds", "3", "numbers are never text"),
    ("channel.bandwidth_hz", "4.0e9", "write 4.0e+9"),
    ("channel.bandwidth_hz", float("nan"), "finite number"),
    ("channel.bandwidth_hz", float("inf"), "finite number"),
    ("channel.rayleigh_fading", 1, "valid boolean"),
    ("channel.rayleigh_fading", "yes", "valid boolean"),
    ("seed", 2**70, "less than or equal to"),
    ("name", "n" * 5000, "at most 200 characters"),
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


def test_integral_numbers_are_integers() -> None:
    config = parse_config(_with("training.rounds", 3.0))
    assert config.training.rounds == 3 and isinstance(config.training.rounds, int)


def test_a_long_bad_value_is_quoted_by_a_short_prefix() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(_with("scheduler.policy", "p" * 100_000))
    detail = info.value.problems[0].to_json()
    assert len(detail["value"]) < 100 and len(detail["message"]) < 1000 and len(str(info.value)) < 2000


def test_a_run_bigger_than_a_worker_may_hold_is_refused_naming_the_model() -> None:
    data = _with("model.d_model", 512)
    data["model"]["ffn_dim"] = 2048
    data["network"]["memory_bytes"] = {"low": 4.0e9, "high": 8.0e9}
    workspace = Workspace(memory_limit_bytes=600 * 2**20)
    with pytest.raises(ConfigError) as info:
        parse_config(data, workspace)
    problem = info.value.problems[0]
    assert problem.field == "model" and "model.d_model = 512" in problem.message
    assert "COLLAPIPE_WORKER_MEMORY_BYTES" in problem.message
    assert parse_config(data)  # the local CLI sets no limit
    data["executor"] = "analytic"  # nothing is allocated on the worker
    assert parse_config(data, workspace)


def test_a_trace_is_read_and_checked_in_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("round,cluster,device,speed_factor\n0,0,0,oops\n")
    service = Workspace.service(tmp_path, PolicyRegistry(), max_file_bytes=10_000, memory_limit_bytes=None)
    with pytest.raises(ConfigError) as info:
        parse_config(_with("network.trace_file", "t.csv"), service)
    assert info.value.problems[0].field == "network.trace_file"
    assert "row 2, column 'speed_factor': not a number" in info.value.problems[0].message
    with pytest.raises(ConfigError, match=r"no file named 'nope\.csv' in the data directory"):
        parse_config(_with("network.trace_file", "nope.csv"), service)
    with pytest.raises(ConfigError, match="relative to the data directory"):
        parse_config(_with("network.trace_file", str(tmp_path / "t.csv")), service)


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[2] / "examples").glob("*.yaml")), ids=str)
def test_examples_read_by_any_yaml_loader_are_valid(path: Path) -> None:
    """PyYAML (YAML 1.1) reads 4.0e9 as text; the examples write numbers every loader reads as numbers."""
    assert parse_config(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("gpt2", "Hugging Face Hub name"),
        ("meta-llama/Llama-2-7b-hf", "Hugging Face Hub name"),
        ("https://huggingface.co/gpt2", "URL"),
        ("/no/such/checkpoint", "does not exist"),
    ],
)
def test_a_pretrained_path_is_a_local_directory_and_never_fetched(name: str, why: str) -> None:
    data = _base()
    data["model"] = {"source": "transformers", "architecture": "gpt2", "pretrained_path": name}
    data["data"]["dataset"] = "pydoc-topics"
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    problem = info.value.problems[0]
    assert problem.field == "model.pretrained_path" and why in problem.message, problem


def test_a_service_names_a_checkpoint_inside_its_data_directory(tmp_path: Path) -> None:
    service = Workspace.service(tmp_path, PolicyRegistry(), max_file_bytes=10_000, memory_limit_bytes=None)
    data = _base()
    data["data"]["dataset"] = "pydoc-topics"
    for name, message in [
        ("gpt2", "no directory named 'gpt2' in the data directory; it looks like a Hugging Face Hub name"),
        ("https://example.org/model", "is a URL; CollaPipe never downloads models"),
        ("../checkpoints/x", "must not contain '..'"),
    ]:
        data["model"] = {"source": "transformers", "architecture": "gpt2", "pretrained_path": name}
        with pytest.raises(ConfigError) as info:
            parse_config(data, service)
        problem = info.value.problems[0]
        assert problem.field == "model.pretrained_path" and message in problem.message, problem


def _checkpoint(root: Path, name: str, **keys: Any) -> dict[str, Any]:
    """A gpt2 checkpoint's config.json under ``root/name`` and a config that names it (pydoc-topics)."""
    (root / name).mkdir(parents=True)
    sizes = {"model_type": "gpt2", "n_embd": 16, "n_head": 2, "n_layer": 2, "vocab_size": 300}
    (root / name / "config.json").write_text(json.dumps({**sizes, "n_positions": 64, **keys}))
    data = _base()
    data["model"] = {"source": "transformers", "architecture": "gpt2", "pretrained_path": name, "seq_len": 16}
    data["data"]["dataset"] = "pydoc-topics"
    return data


def test_a_checkpoint_whose_sizes_are_refused_is_never_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from collapipe_core import validation

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was built")

    data = _checkpoint(tmp_path, "checkpoints/deep", n_layer=10**6)
    monkeypatch.setattr(validation, "build_environment", refuse)
    service = Workspace.service(tmp_path, PolicyRegistry(), max_file_bytes=2**20, memory_limit_bytes=None)
    with pytest.raises(ConfigError) as info:
        parse_config(data, service)
    [problem] = info.value.problems
    assert problem.field == "model.pretrained_path" and problem.value == "checkpoints/deep"
    assert "n_layer is 1000000, outside what CollaPipe builds: model.num_blocks must be at most 1024" in (
        problem.message
    )
    assert str(tmp_path) not in problem.message


@pytest.mark.parametrize(
    ("keys", "raised"), [({"n_head": 0}, "at least 1"), ({"activation_function": "no"}, "KeyError")]
)
def test_a_checkpoint_transformers_cannot_build_is_a_problem_on_the_pretrained_path(
    keys: dict[str, Any], raised: str, tmp_path: Path
) -> None:
    service = Workspace.service(tmp_path, PolicyRegistry(), max_file_bytes=2**20, memory_limit_bytes=None)
    with pytest.raises(ConfigError) as info:
        parse_config(_checkpoint(tmp_path, "checkpoints/odd", **keys), service)
    [problem] = info.value.problems
    assert problem.field == "model.pretrained_path" and raised in problem.message
    assert str(tmp_path) not in problem.message


def test_anything_raised_while_building_a_transformers_model_is_a_problem_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from collapipe_core import validation

    def crash(*args: object, **kwargs: object) -> None:
        raise IndexError("list index out of range")  # e.g. measuring the profile of an odd model

    data, builtin = _checkpoint(tmp_path, "checkpoints/odd"), _base()
    monkeypatch.setattr(validation, "build_environment", crash)
    service = Workspace.service(tmp_path, PolicyRegistry(), max_file_bytes=2**20, memory_limit_bytes=None)
    with pytest.raises(ConfigError) as info:
        parse_config(data, service)
    [problem] = info.value.problems
    assert (
        problem.field == "model.pretrained_path"
        and "(IndexError: list index out of range)" in problem.message
    )
    with pytest.raises(IndexError):  # CollaPipe's own models: a bug, not the user's input
        parse_config(builtin, service)


def test_checkpoint_problems_name_the_config_s_path_never_the_server_s(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    root = tmp_path / "data"
    data = _checkpoint(root, "checkpoints/linked")
    (root / "checkpoints" / "linked" / "config.json").unlink()
    (root / "checkpoints" / "linked" / "config.json").symlink_to(outside / "config.json")
    service = Workspace.service(root, PolicyRegistry(), max_file_bytes=2**20, memory_limit_bytes=None)
    with pytest.raises(ConfigError) as info:  # a config.json leaving the data directory is not read
        parse_config(data, service)
    [problem] = info.value.problems
    assert problem.field == "model.pretrained_path"
    assert "no file named 'checkpoints/linked/config.json' in the data directory" in problem.message
    (root / "checkpoints" / "linked" / "config.json").unlink()
    with pytest.raises(ConfigError) as info:
        parse_config(data, service)
    [problem] = info.value.problems
    assert (
        problem.message.endswith(
            "'checkpoints/linked' has no config.json; give a directory written by save_pretrained"
        )
        and str(tmp_path) not in problem.message
    )


def test_a_trace_with_a_huge_number_is_refused_naming_the_field(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text('[{"round": ' + "9" * 5000 + ', "cluster": 0, "device": 0}]')
    service = Workspace.service(tmp_path, PolicyRegistry(), max_file_bytes=2**20, memory_limit_bytes=None)
    with pytest.raises(ConfigError) as info:
        parse_config(_with("network.trace_file", "t.json"), service)
    [problem] = info.value.problems
    assert problem.field == "network.trace_file" and "not valid JSON" in problem.message


def test_a_run_s_size_is_bounded_before_anything_runs() -> None:
    """A million devices validated in about a second and then filled the database: the devices of a run
    and its device records (devices × rounds) are bounded, each refusal naming the field."""
    with pytest.raises(ConfigError) as err:
        parse_config({"network": {"num_clusters": 1000, "devices_per_cluster": 1000}})
    assert [p.field for p in err.value.problems] == ["network.devices_per_cluster"]
    assert "4096" in err.value.problems[0].message
    with pytest.raises(ConfigError) as err:
        parse_config(
            {"network": {"num_clusters": 64, "devices_per_cluster": 64}, "training": {"rounds": 10_000}}
        )
    assert [p.field for p in err.value.problems] == ["training.rounds"]
    assert "at most 2441 rounds" in err.value.problems[0].message
