"""/api/files: operators upload datasets, traces and checkpoints into the data directory by name;
configs then name them; viewers list; admins delete. Hostile names and oversized uploads change
nothing."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker

from tests.backend.builders import tiny_config
from tests.backend.client import SyncClient
from tests.backend.conftest import Api, RecordingDispatcher, add_user

pytestmark = pytest.mark.deployments("embedded")  # files live on disk: the database plays no part

LANGS = [("the cat sat on the mat", "en"), ("le chat est sur le tapis", "fr"), ("der Hund ist hier", "de")]


def _csv(rows: int) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["text", "label"])
    for i in range(rows):
        text, label = LANGS[i % 3]
        writer.writerow([f"{text} {i}", label])
    return out.getvalue().encode()


def _put(api: Api, name: str, body: bytes, role: str = "operator", **params: Any) -> Any:
    headers = {**api.as_(role), "content-type": "application/octet-stream"}
    return api.client.request("PUT", f"/api/files/{name}", content=body, headers=headers, params=params)


def _files_on_disk(settings: Any) -> list[str]:
    root = Path(settings.data_dir)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def test_an_uploaded_dataset_is_listed_and_a_config_can_name_it(api: Api, settings: Any) -> None:
    assert api.client.get("/api/files", headers=api.as_("viewer")).json() == []
    created = _put(api, "datasets/langs.csv", _csv(300))
    assert created.status_code == 201, created.text
    listed = api.client.get("/api/files", headers=api.as_("viewer")).json()
    assert [(f["name"], f["kind"]) for f in listed] == [("datasets/langs.csv", "dataset")]
    assert listed[0]["size_bytes"] == len(_csv(300))
    config = tiny_config(
        executor="simulated",
        model={"kind": "classifier", "seq_len": 16},
        data={
            "dataset": "files",
            "files": {"train": "datasets/langs.csv"},
            "tokenizer": {"kind": "bpe", "vocab_size": 100},
            "samples_per_cluster": 64,
            "eval_samples": 32,
        },
    )
    response = api.client.post("/api/config/validate", json=config, headers=api.as_("viewer"))
    assert response.status_code == 200, response.text
    assert _put(api, "datasets/langs.csv", b"text,label\n").status_code == 409
    replaced = _put(api, "datasets/langs.csv", b"text,label\nhi,en\n", overwrite="true")
    assert replaced.status_code == 201 and replaced.json()["size_bytes"] == 17
    missing_column = api.client.post("/api/config/validate", json=config, headers=api.as_("viewer"))
    assert missing_column.status_code == 422


@pytest.mark.parametrize(
    "name",
    [
        "../escape.csv",  # the client normalises the URL: another route answers
        "datasets/../../escape.csv",
        "datasets/%2e%2e/%2e%2e/escape.csv",  # reaches the API as datasets/../../escape.csv
        "datasets/.hidden.csv",
        "datasets/tool.exe",
        "datasets/a/b.csv",
        "traces/t.parquet",
        "secrets/x.csv",
        "checkpoints/m/evil.py",
        "checkpoints/m/sub/config.json",
        "checkpoints/config.json",
        "datasets/" + "x" * 200 + ".csv",
        "datasets/caf\u00e9.csv",
    ],
)
def test_uploads_outside_the_three_folders_or_of_other_files_are_refused(
    api: Api, settings: Any, name: str
) -> None:
    response = _put(api, name, b"text,label\nhi,en\n")
    assert response.status_code in (404, 405, 422), response.text
    assert _files_on_disk(settings) == []


def test_roles_and_deletion(api: Api, settings: Any) -> None:
    assert _put(api, "traces/t.csv", b"round,cluster,device\n0,0,0\n", role="viewer").status_code == 403
    assert _put(api, "traces/t.csv", b"round,cluster,device\n0,0,0\n").status_code == 201
    assert api.client.delete("/api/files/traces/t.csv", headers=api.as_("operator")).status_code == 403
    assert api.client.delete("/api/files/traces/t.csv", headers=api.as_("admin")).status_code == 204
    assert api.client.delete("/api/files/traces/t.csv", headers=api.as_("admin")).status_code == 404
    assert api.client.delete("/api/files/%2e%2e/%2e%2e/etc", headers=api.as_("admin")).status_code == 422
    assert _files_on_disk(settings) == ["traces"]


def test_an_oversized_upload_gets_413_and_leaves_nothing(
    app_factory: Callable[..., FastAPI], session_factory: sessionmaker[Session], settings: Any
) -> None:
    _, token = add_user(session_factory, "op", "operator")
    headers = {"Authorization": f"Bearer {token}", "content-type": "application/octet-stream"}
    with SyncClient(app_factory(RecordingDispatcher(), max_upload_bytes=4096)) as client:
        response = client.request("PUT", "/api/files/datasets/big.csv", content=_csv(1000), headers=headers)
        assert response.status_code == 413 and response.json()["error"]["code"] == "payload_too_large"
        small = client.request("PUT", "/api/files/datasets/small.csv", content=_csv(10), headers=headers)
        assert small.status_code == 201
    assert _files_on_disk(settings) == ["datasets", "datasets/small.csv"]


def test_a_checkpoint_uploaded_file_by_file_loads_through_pretrained_path(
    api: Api, settings: Any, tmp_path: Path
) -> None:
    """save_pretrained's files, uploaded one by one, make a checkpoint configs name by its folder."""
    from transformers import BertConfig, BertForSequenceClassification

    saved = tmp_path / "saved"
    config = BertConfig(
        vocab_size=120, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=32, num_labels=2,
    )  # fmt: skip
    BertForSequenceClassification(config).save_pretrained(saved)
    for path in sorted(saved.iterdir()):
        assert _put(api, f"checkpoints/tiny-bert/{path.name}", path.read_bytes()).status_code == 201
    listed = api.client.get("/api/files", headers=api.as_("viewer")).json()
    assert [(f["name"], f["kind"], f["complete"]) for f in listed] == [
        ("checkpoints/tiny-bert", "checkpoint", True)
    ]
    run_config = tiny_config(data={"dataset": "synthetic-parity"})
    run_config["model"] = {  # the sizes come from the checkpoint
        "source": "transformers",
        "architecture": "bert",
        "pretrained_path": "checkpoints/tiny-bert",
        "seq_len": 12,
    }
    response = api.client.post("/api/config/validate", json=run_config, headers=api.as_("viewer"))
    assert response.status_code == 200, response.text
    model = response.json()["model"]
    assert (model["d_model"], model["num_blocks"], model["vocab_size"]) == (16, 2, 120)
    conflicting = {**run_config, "model": {**run_config["model"], "d_model": 32, "num_heads": 2}}
    refused = api.client.post("/api/config/validate", json=conflicting, headers=api.as_("viewer"))
    detail = refused.json()["error"]["details"][0]
    assert (
        refused.status_code == 422
        and detail["field"] == "config.model.d_model"
        and "gives 16" in detail["message"]
    )
    assert api.client.delete("/api/files/checkpoints/tiny-bert", headers=api.as_("admin")).status_code == 204
    gone = api.client.post("/api/config/validate", json=run_config, headers=api.as_("viewer"))
    assert (
        gone.status_code == 422
        and gone.json()["error"]["details"][0]["field"] == "config.model.pretrained_path"
    )


def test_a_checkpoint_without_its_config_is_listed_incomplete(api: Api) -> None:
    assert _put(api, "checkpoints/half/model.safetensors", b"\x00" * 16).status_code == 201
    listed = api.client.get("/api/files", headers=api.as_("viewer")).json()
    assert [(f["name"], f["complete"], f["files"]) for f in listed] == [
        ("checkpoints/half", False, ["model.safetensors"])
    ]
    assert api.client.delete("/api/files/checkpoints/half", headers=api.as_("admin")).status_code == 204
