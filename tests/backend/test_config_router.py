"""/api/config as the launch form uses it: POST /validate names every problem of a config in one answer,
and what the form shows beside the fields — the data's size and the largest samples it allows (POST
/dataset), a checkpoint's sizes (GET /checkpoint), the Hugging Face families' config fields (GET
/architectures)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.backend.conftest import Api

pytestmark = pytest.mark.deployments("embedded")  # the config endpoints are the same code on both

PRESETS = Path(__file__).resolve().parents[2] / "frontend" / "presets"
OWN_MODEL = {
    "source": "transformers",
    "architecture": "gpt2",
    "pretrained_path": "checkpoints/tiny-gpt2",
    "seq_len": 64,
}
GPT2 = {"model_type": "gpt2", "n_embd": 32, "n_head": 2, "n_layer": 4, "n_positions": 64, "vocab_size": 300}


def _data_dir(api: Api) -> Path:
    data_dir = Path(api.app.state.settings.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    return data_dir


def _own_checkpoint_and_text(api: Api) -> None:
    """checkpoints/tiny-gpt2 (its config.json) and datasets/own.jsonl (300 short code texts)."""
    data_dir = _data_dir(api)
    (data_dir / "checkpoints" / "tiny-gpt2").mkdir(parents=True)
    (data_dir / "checkpoints" / "tiny-gpt2" / "config.json").write_text(json.dumps(GPT2))
    (data_dir / "datasets").mkdir()
    lines = (
        json.dumps({"text": f"def f{i}(x):\n    return x * {i} + {i * i}  # scaled"}) for i in range(300)
    )
    (data_dir / "datasets" / "own.jsonl").write_text("\n".join(lines) + "\n")


def _llama_preset_on_own_files() -> dict[str, Any]:
    """The LLaMA preset pointed at a gpt2 checkpoint and the user's JSONL, as a new user first tries it."""
    config: dict[str, Any] = json.loads((PRESETS / "llm-causal.json").read_text(encoding="utf-8"))
    config["model"]["pretrained_path"] = "checkpoints/tiny-gpt2"
    config["data"]["dataset"] = "files"
    config["data"]["files"] = {"train": "datasets/own.jsonl"}
    return config


def _problems(response: Any) -> dict[str, str]:
    assert response.status_code == 422, response.text
    return {d["field"]: d["message"] for d in response.json()["error"]["details"]}


def test_every_problem_of_a_config_comes_in_one_answer(api: Api) -> None:
    """Six validate-and-fix cycles before: a typo hid the checkpoint's problems, a size the checkpoint
    gives hid the data's, the data's hid hf_config's."""
    _own_checkpoint_and_text(api)
    config = _llama_preset_on_own_files()
    config["training"]["lr"] = "0.0o3"  # a typo in another section
    viewer = api.as_("viewer")
    problems = _problems(api.client.post("/api/config/validate", json=config, headers=viewer))
    assert set(problems) == {
        "config.training.lr",
        "config.model.architecture",
        "config.model",  # num_kv_heads, which gpt2 does not have
        "config.model.d_model",
        "config.model.num_heads",
        "config.model.ffn_dim",
        "config.model.num_blocks",
        "config.model.hf_config.rope_theta",
        "config.data.samples_per_cluster",
    }, problems
    assert "set model.architecture: gpt2" in problems["config.model.architecture"]
    assert "num_kv_heads applies to architecture llama only" in problems["config.model"]
    assert "GPT2Config has no field 'rope_theta'" in problems["config.model.hf_config.rope_theta"]
    assert (
        "data.eval_samples leaves no sample for the clusters" in problems["config.data.samples_per_cluster"]
    )
    # fixed as the answer says (the sizes are the checkpoint's): valid
    config["training"]["lr"] = 0.003
    config["model"] = OWN_MODEL
    config["data"].update({"samples_per_cluster": 30, "eval_samples": 20})
    normalized = api.client.post("/api/config/validate", json=config, headers=viewer)
    assert normalized.status_code == 200, normalized.text
    assert {
        k: normalized.json()["model"][k] for k in ("d_model", "num_heads", "num_blocks", "vocab_size")
    } == {
        "d_model": 32,
        "num_heads": 2,
        "num_blocks": 4,
        "vocab_size": 300,
    }


def test_an_empty_number_is_told_to_be_left_out_not_to_be_written_differently(api: Api) -> None:
    config = json.loads((PRESETS / "quickstart.json").read_text(encoding="utf-8"))
    config["model"]["d_model"] = ""
    config["data"]["eval_samples"] = " "
    problems = _problems(api.client.post("/api/config/validate", json=config, headers=api.as_("viewer")))
    assert set(problems) == {"config.model.d_model", "config.data.eval_samples"}
    for message in problems.values():
        assert message == "is empty; give a number, or leave the field out for its default"


def test_the_data_size_and_the_largest_samples_it_allows_agree_with_the_check(api: Api) -> None:
    _own_checkpoint_and_text(api)
    config = _llama_preset_on_own_files()
    config["model"] = OWN_MODEL
    config["training"]["lr"] = "0.0o3"  # another section's problem does not stop the count
    viewer = api.as_("viewer")
    answer = api.client.post("/api/config/dataset", json=config, headers=viewer)
    assert answer.status_code == 200, answer.text
    size = answer.json()
    assert (
        size["source"] == "'datasets/own.jsonl'"
        and size["unit"] == "windows of model.seq_len + 1 = 65 tokens"
    )
    assert size["held_out"] is None and size["train"] > 0
    eval_samples = config["data"]["eval_samples"]  # 128: more than the file's windows
    assert (
        size["train"] < eval_samples
        and size["max_samples_per_cluster"] == 0
        and size["max_eval_samples"] == 0
    )
    # the largest values it offers are the largest the check accepts
    config["training"]["lr"] = 0.003
    config["data"]["eval_samples"] = 20
    largest = api.client.post("/api/config/dataset", json=config, headers=viewer).json()[
        "max_samples_per_cluster"
    ]
    assert largest == (size["train"] - 20) // 2
    config["data"]["samples_per_cluster"] = largest + 1
    refused = _problems(api.client.post("/api/config/validate", json=config, headers=viewer))
    assert f"data.samples_per_cluster may be at most {largest}" in refused["config.data.samples_per_cluster"]
    config["data"]["samples_per_cluster"] = largest
    assert api.client.post("/api/config/validate", json=config, headers=viewer).status_code == 200
    # data that cannot be read: 422 naming the field
    config["data"]["files"] = {"train": "datasets/missing.jsonl"}
    missing = _problems(api.client.post("/api/config/dataset", json=config, headers=viewer))
    assert list(missing) == ["config.data.files.train"]


def test_the_data_size_of_a_bundled_dataset_and_of_an_eval_file(api: Api) -> None:
    viewer = api.as_("viewer")
    quickstart = json.loads((PRESETS / "quickstart.json").read_text(encoding="utf-8"))
    size = api.client.post("/api/config/dataset", json=quickstart, headers=viewer).json()
    assert size["source"] == "dataset 'cmudict'" and size["unit"] == "samples after filtering"
    data = quickstart["data"]
    assert size["max_samples_per_cluster"] == (size["train"] - data["eval_samples"]) // 2
    assert size["max_eval_samples"] == size["train"] - 2 * data["samples_per_cluster"]
    data_dir = _data_dir(api)
    rows = "".join(f'{{"text": "row {i}", "label": {i % 2}}}\n' for i in range(100))
    (data_dir / "train.jsonl").write_text(rows)
    (data_dir / "eval.jsonl").write_text("".join(rows.splitlines(keepends=True)[:30]))
    files = {
        **quickstart,
        "model": {"kind": "classifier", "d_model": 16, "num_heads": 2, "ffn_dim": 32, "num_blocks": 4},
        "data": {"dataset": "files", "files": {"train": "train.jsonl", "eval": "eval.jsonl"}},
    }
    size = api.client.post("/api/config/dataset", json=files, headers=viewer).json()
    assert (size["unit"], size["train"], size["held_out"]) == ("rows", 100, 30)
    assert (size["max_samples_per_cluster"], size["max_eval_samples"]) == (50, 30)


def test_a_checkpoint_s_sizes_are_read_from_its_config_json_within_bounds(api: Api) -> None:
    _own_checkpoint_and_text(api)
    data_dir, viewer = _data_dir(api), api.as_("viewer")
    answer = api.client.get(
        "/api/config/checkpoint", params={"path": "checkpoints/tiny-gpt2"}, headers=viewer
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "architecture": "gpt2",
        "d_model": 32,
        "num_heads": 2,
        "num_kv_heads": None,
        "ffn_dim": 128,  # n_inner null: 4 x n_embd
        "num_blocks": 4,
        "num_decoder_layers": None,
        "vocab_size": 300,
        "max_positions": 64,
    }
    (data_dir / "checkpoints" / "huge").mkdir()
    (data_dir / "checkpoints" / "huge" / "config.json").write_text(json.dumps({**GPT2, "pad": "x" * 2**20}))
    (data_dir / "checkpoints" / "deep").mkdir()
    (data_dir / "checkpoints" / "deep" / "config.json").write_text(json.dumps({**GPT2, "n_layer": 10**6}))
    for path, fragment in [
        ("checkpoints/huge", "config.json is 1.0 MiB; a checkpoint's config.json may be at most 1 MiB"),
        ("checkpoints/deep", "n_layer is 1000000, outside what CollaPipe builds"),
        ("../outside", "must not contain '..'"),
        ("gpt2", "it looks like a Hugging Face Hub name"),
        ("datasets/own.jsonl", "no directory named 'datasets/own.jsonl' in the data directory"),
    ]:
        refused = api.client.get("/api/config/checkpoint", params={"path": path}, headers=viewer)
        [detail] = refused.json()["error"]["details"]
        assert refused.status_code == 422 and detail["field"] == "query.path", refused.text
        assert fragment in detail["message"] and str(data_dir) not in refused.text, detail
    too_long = api.client.get("/api/config/checkpoint", params={"path": "c" * 256}, headers=viewer)
    assert too_long.status_code == 422
    assert api.client.get("/api/config/checkpoint", params={"path": "gpt2"}).status_code == 401


def test_the_families_config_fields_tell_what_another_architecture_lacks(api: Api) -> None:
    families = api.client.get("/api/config/architectures", headers=api.as_("viewer")).json()
    assert {name: family["kind"] for name, family in families.items()} == {
        "bert": "classifier",
        "bart": "seq2seq",
        "gpt2": "causal_lm",
        "llama": "causal_lm",
    }
    assert "rope_theta" in families["llama"]["config_fields"]
    assert "rope_theta" not in families["gpt2"]["config_fields"]
    assert "layer_norm_epsilon" in families["gpt2"]["config_fields"]
