"""Hostile but fair input: every request gets a 4xx with the stable JSON error
``{"error": {"code", "message", "details": [{"field", "value", "message"}]}}`` naming the field, and
changes nothing — no code imported, no file or directory created, no row stored — and the server
answers normally afterwards.

Covered: a config's policy as an import path (on every endpoint that takes a config), files outside
the data directory (absolute paths, ``..``, URLs, symlinks leaving it, devices, directories, missing
files: one answer for all), oversized and malformed trace files (no content in the answer or the
log), NaN and ±Infinity, loose bodies (unknown fields, booleans or strings for numbers, fractions
for integers), oversized bodies (413, declared and chunked), deep nesting, broken JSON, huge
integers, a run too big for a worker, and path traversal on the static files.

Both deployments run what reaches the database or the deployment's executor; what validation refuses
before any deployment-specific code runs on the embedded one.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi import FastAPI
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from backend.db.models import Experiment, Run, RunEvent
from tests.backend.builders import tiny_config
from tests.backend.conftest import Api, RecordingDispatcher
from tests.backend.live_server import serve

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SECRET = "SECRET-7d1f-never-echo"
MARKER_MODULE = "collapipe_hostile_marker"


@dataclass
class Hostile:
    api: Api
    data_dir: Path
    marker: Path  # written if MARKER_MODULE is ever imported

    def snapshot(self) -> tuple[Any, ...]:
        """What a request must not change: stored rows, the data directory, imported modules."""
        with self.api.session_factory() as session:
            counts = tuple(
                session.scalar(select(func.count()).select_from(model))
                for model in (Run, Experiment, RunEvent)
            )
        files = sorted(str(p.relative_to(self.data_dir)) for p in self.data_dir.rglob("*"))
        return counts, files, MARKER_MODULE in sys.modules, self.marker.exists()

    def check(self, response: httpx.Response, status: int, field: str | None = None) -> dict[str, Any]:
        """The response is ``status`` with the error shape (naming ``field``), and the server answers."""
        assert response.status_code == status, response.text[:2000]
        body: dict[str, Any] = response.json()
        assert set(body) == {"error"} and {"code", "message", "details"} <= set(body["error"])
        if field is not None:
            fields = [d["field"] for d in body["error"]["details"]]
            assert field in fields, (field, fields)
        assert len(response.content) < 20_000, "an error answer must quote values by a short prefix"
        viewer = self.api.as_("viewer")
        assert self.api.client.get("/api/runs", headers=viewer).status_code == 200
        assert self.api.client.get("/healthz").status_code == 200
        return body


@pytest.fixture
def hostile(api: Api, settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hostile]:
    data_dir = Path(settings.data_dir)
    (data_dir / "traces").mkdir(parents=True)
    (data_dir / "traces" / "good.csv").write_text("round,cluster,device,speed_factor\n0,0,0,0.5\n")
    secret = tmp_path / "secret.txt"
    secret.write_text(f"password={SECRET}\n")
    (data_dir / "out.csv").symlink_to(secret)
    (data_dir / "zero.csv").symlink_to("/dev/zero")
    (data_dir / "bad.csv").write_text(f"round,cluster,device,speed_factor\n0,0,0,{SECRET}\n")
    modules = tmp_path / "modules"
    modules.mkdir()
    marker = tmp_path / "imported"
    (modules / f"{MARKER_MODULE}.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\nclass Policy: name = 'x'\n"
    )
    monkeypatch.syspath_prepend(str(modules))
    yield Hostile(api, data_dir, marker)


def _with(config: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    *parents, leaf = dotted.split(".")
    node = config
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return config


def _config_requests(
    hostile: Hostile, config: dict[str, Any]
) -> Iterator[tuple[str, str, dict[str, Any], str]]:
    """(method, path, body, field prefix) of every endpoint that takes a config, with the role allowed."""
    api = hostile.api
    op = api.as_("operator")
    experiment = api.client.post("/api/experiments", json={"config": tiny_config()}, headers=op).json()
    run = api.client.post("/api/runs", json={"config": tiny_config()}, headers=op).json()
    yield "POST", "/api/config/validate", config, "config"
    yield "POST", "/api/config/preflight", config, "config"
    yield "POST", "/api/runs", {"config": config}, "config"
    yield "POST", "/api/experiments", {"config": config}, "config"
    yield "PATCH", f"/api/experiments/{experiment['id']}", {"config": config}, "config"
    policy = config["scheduler"]["policy"]
    yield "POST", f"/api/runs/{run['id']}/fork", {"round": 0, "policy": policy}, "config"


POLICY_IMPORTS = [
    "os:abort",
    "tempfile:mkdtemp",
    "this:x",
    "os:system",
    "builtins:exec",
    f"{MARKER_MODULE}:Policy",
]


def test_a_policy_import_path_is_never_imported(hostile: Hostile) -> None:
    api = hostile.api
    this_loaded = "this" in sys.modules
    for name in POLICY_IMPORTS:
        for method, path, body, prefix in _config_requests(hostile, tiny_config(scheduler={"policy": name})):
            before = hostile.snapshot()
            role = "viewer" if path.startswith("/api/config") else "operator"
            response = api.client.request(method, path, json=body, headers=api.as_(role))
            error = hostile.check(response, 422, f"{prefix}.scheduler.policy")
            message = next(d["message"] for d in error["error"]["details"] if d["field"].endswith("policy"))
            assert "is not registered" in message and "dssda" in message and "slow-uniform" in message
            assert hostile.snapshot() == before, (name, path)
    assert not hostile.marker.exists() and MARKER_MODULE not in sys.modules
    assert ("this" in sys.modules) == this_loaded


OUTSIDE = [
    "/etc/passwd",
    "/proc/self/environ",
    "../../etc/passwd",
    "traces/../../../etc/passwd",
    "http://169.254.169.254/latest/meta-data",
    "file:///etc/passwd",
    "~/.ssh/id_rsa",
    "/dev/zero",
]
HIDDEN = ["out.csv", "zero.csv", "missing.csv", "traces"]  # symlink out, device, missing, directory


@pytest.mark.deployments("embedded")  # refused before any deployment-specific code: validation
def test_config_files_come_only_from_the_data_directory(
    hostile: Hostile, caplog: pytest.LogCaptureFixture
) -> None:
    api, viewer = hostile.api, hostile.api.as_("viewer")
    caplog.set_level(logging.DEBUG)
    answers = {}
    for name in OUTSIDE + HIDDEN:
        before = hostile.snapshot()
        config = tiny_config(network={"trace_file": name})
        response = api.client.post("/api/config/validate", json=config, headers=viewer)
        error = hostile.check(response, 422, "config.network.trace_file")
        assert "root:" not in response.text and SECRET not in response.text and "PATH=" not in response.text
        assert hostile.snapshot() == before
        message = error["error"]["details"][0]["message"]
        answers[name] = message.replace(repr(name), "NAME")
    assert {answers[name] for name in HIDDEN} == {"no file named NAME in the data directory"}
    assert all("relative to the data directory" in answers[name] for name in OUTSIDE)
    bad = api.client.post(
        "/api/config/validate", json=tiny_config(network={"trace_file": "bad.csv"}), headers=viewer
    )
    detail = hostile.check(bad, 422, "config.network.trace_file")["error"]["details"][0]
    assert "row 2, column 'speed_factor': not a number" in detail["message"] and SECRET not in bad.text
    assert SECRET not in caplog.text and "root:" not in caplog.text
    good = api.client.post(
        "/api/config/validate", json=tiny_config(network={"trace_file": "traces/good.csv"}), headers=viewer
    )
    assert good.status_code == 200 and good.json()["network"]["trace_file"] == "traces/good.csv"


@pytest.mark.deployments("embedded")  # refused before any deployment-specific code: validation
def test_a_file_over_the_size_limit_is_refused_unread(
    app_factory: Callable[..., FastAPI], settings: Any, session_factory: sessionmaker[Session]
) -> None:
    from tests.backend.client import SyncClient
    from tests.backend.conftest import add_user

    data_dir = Path(settings.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "big.csv").write_text("round,cluster,device\n" + "0,0,0\n" * 2000)
    _, token = add_user(session_factory, "v", "viewer")
    with SyncClient(app_factory(RecordingDispatcher(), max_file_bytes=4096)) as client:
        response = client.post(
            "/api/config/validate",
            json=tiny_config(network={"trace_file": "big.csv"}),
            headers={"Authorization": f"Bearer {token}"},
        )
    assert response.status_code == 422
    detail = response.json()["error"]["details"][0]
    assert detail["field"] == "config.network.trace_file" and "COLLAPIPE_MAX_FILE_BYTES" in detail["message"]


NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e999"]


def test_nan_and_infinity_are_refused_naming_the_field(hostile: Hostile) -> None:
    api, op = hostile.api, hostile.api.as_("operator")
    for literal in NON_FINITE:
        body = json.dumps({"config": tiny_config()}).replace('"lr": 0.01', f'"lr": {literal}')
        assert literal in body
        for path in ("/api/runs", "/api/experiments"):
            before = hostile.snapshot()
            response = api.client.post(path, content=body, headers={**op, "content-type": "application/json"})
            hostile.check(response, 422, "body.config.training.lr")
            assert hostile.snapshot() == before
        raw = json.dumps(tiny_config()).replace('"lr": 0.01', f'"lr": {literal}')
        response = api.client.post(
            "/api/config/validate",
            content=raw,
            headers={**api.as_("viewer"), "content-type": "application/json"},
        )
        hostile.check(response, 422, "body.training.lr")
    run = api.client.post("/api/runs", json={"config": tiny_config()}, headers=op).json()
    fork = api.client.post(
        f"/api/runs/{run['id']}/fork",
        content='{"round": 0, "V": NaN}',
        headers={**op, "content-type": "application/json"},
    )
    hostile.check(fork, 422, "body.V")


def test_request_bodies_are_strict(hostile: Hostile) -> None:
    api, op = hostile.api, hostile.api.as_("operator")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"config": tiny_config(), "owner": "someone-else"}, "body.owner"),
        ({"config": _with(tiny_config(), "training.rounds", True)}, "config.training.rounds"),
        ({"config": _with(tiny_config(), "training.rounds", "3")}, "config.training.rounds"),
        ({"config": _with(tiny_config(), "training.rounds", 2.5)}, "config.training.rounds"),
        ({"config": _with(tiny_config(), "channel.bandwidth_hz", "4.0e9")}, "config.channel.bandwidth_hz"),
        (
            {"config": _with(tiny_config(), "channel.rayleigh_fading", "yes")},
            "config.channel.rayleigh_fading",
        ),
        ({"config": _with(tiny_config(), "seed", 10**30)}, "config.seed"),
        ({"config": _with(tiny_config(), "model.colour", "blue")}, "config.model.colour"),
        ({"experiment_id": "1"}, "body.experiment_id"),
        ({"experiment_id": True}, "body.experiment_id"),
        ({"experiment_id": 10**30}, "body.experiment_id"),
        ({"config": tiny_config(), "name": "n" * 500_000}, "body.name"),
        ({"config": _with(tiny_config(), "name", "x\x00y")}, "config.name"),
    ]
    for body, field in cases:
        before = hostile.snapshot()
        hostile.check(api.client.post("/api/runs", json=body, headers=op), 422, field)
        assert hostile.snapshot() == before, field
    run = api.client.post("/api/runs", json={"config": tiny_config()}, headers=op).json()
    for body, field in [
        ({"round": 1.5}, "body.round"),
        ({"round": "0"}, "body.round"),
        ({"round": False}, "body.round"),
    ]:
        hostile.check(api.client.post(f"/api/runs/{run['id']}/fork", json=body, headers=op), 422, field)
    assert api.client.post(f"/api/runs/{run['id']}/fork", json={"round": 0.0}, headers=op).status_code == 201
    integral = api.client.post(
        "/api/runs", json={"config": _with(tiny_config(), "training.rounds", 3.0)}, headers=op
    )
    assert integral.status_code == 201 and integral.json()["config"]["training"]["rounds"] == 3


def test_broken_deep_and_oversized_bodies(hostile: Hostile) -> None:
    api, op = hostile.api, hostile.api.as_("operator")
    json_headers = {**op, "content-type": "application/json"}
    before = hostile.snapshot()
    hostile.check(api.client.post("/api/runs", content=b'{"config": {', headers=json_headers), 422)
    deep = '{"config": ' + "[" * 100_000 + "]" * 100_000 + "}"
    error = hostile.check(api.client.post("/api/runs", content=deep, headers=json_headers), 422, "body")
    assert "nested deeper" in error["error"]["details"][0]["message"]
    nested = json.dumps({"config": _with(tiny_config(), "model.hf_config", {"a": [[[[[[[[[[1]]]]]]]]]]})})
    hostile.check(api.client.post("/api/runs", content=nested, headers=json_headers), 422)
    huge = b'{"name": "' + b"n" * (2 * 2**20) + b'"}'
    hostile.check(api.client.post("/api/runs", content=huge, headers=json_headers), 413)
    assert hostile.snapshot() == before


@pytest.mark.deployments("embedded")  # refused before any deployment-specific code: validation
def test_a_chunked_body_over_the_limit_gets_413(app_factory: Callable[..., FastAPI]) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"config": {"name": "'
        for _ in range(64):
            yield b"n" * 65536
        yield b'"}}'

    with serve(app_factory(RecordingDispatcher())) as url:
        response = httpx.post(
            f"{url}/api/config/validate", content=chunks(), headers={"content-type": "application/json"}
        )
        assert response.status_code == 413 and response.json()["error"]["code"] == "payload_too_large"
        assert httpx.get(f"{url}/healthz").status_code == 200


@pytest.mark.deployments("embedded")  # refused before any deployment-specific code: validation
def test_a_run_too_big_for_a_worker_is_refused_before_launch(
    app_factory: Callable[..., FastAPI], session_factory: sessionmaker[Session]
) -> None:
    from tests.backend.client import SyncClient
    from tests.backend.conftest import add_user

    _, token = add_user(session_factory, "o", "operator")
    big = tiny_config(executor="simulated", model={"d_model": 512, "ffn_dim": 2048, "num_heads": 8})
    with SyncClient(app_factory(RecordingDispatcher(), worker_memory_bytes=600 * 2**20)) as client:
        response = client.post(
            "/api/runs", json={"config": big}, headers={"Authorization": f"Bearer {token}"}
        )
        assert response.status_code == 422
        detail = response.json()["error"]["details"][0]
        assert detail["field"] == "config.model" and "model.d_model = 512" in detail["message"]
        assert client.get("/api/runs", headers={"Authorization": f"Bearer {token}"}).json()["total"] == 0


@pytest.mark.deployments("embedded")  # refused before any deployment-specific code: validation
def test_static_files_stay_inside_the_frontend(hostile: Hostile) -> None:
    for path in ("/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/js/..%2f..%2f..%2fpyproject.toml"):
        response = hostile.api.client.get(path)
        assert (
            response.status_code == 404 and "root:" not in response.text and "[project]" not in response.text
        )


@pytest.mark.deployments("embedded")  # refused before any deployment-specific code: validation
@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_loaded_with_pyyaml_validate_through_the_api(api: Api, path: Path) -> None:
    """Scripts load the examples with PyYAML (YAML 1.1, which reads 4.0e9 as text) and post them."""
    response = api.client.post(
        "/api/config/validate", json=yaml.safe_load(path.read_text()), headers=api.as_("viewer")
    )
    assert response.status_code == 200, response.text


@pytest.mark.deployments("embedded")  # refused before any deployment-specific code: validation
def test_a_preflight_past_its_deadline_is_stopped_and_the_next_one_works(
    app_factory: Callable[..., FastAPI], session_factory: sessionmaker[Session]
) -> None:
    """Round 0 of DSSDA over 64 clusters × 64 devices and 16 blocks takes over 90 s on 2 cores: the
    pre-flight process is killed at the deadline, the API answers meanwhile, and the next pre-flight
    starts a new process."""
    from tests.backend.client import SyncClient
    from tests.backend.conftest import add_user

    _, token = add_user(session_factory, "v", "viewer")
    viewer = {"Authorization": f"Bearer {token}"}
    huge = tiny_config(
        network={"num_clusters": 64, "devices_per_cluster": 64},
        model={"num_blocks": 16},
        data={"samples_per_cluster": 8, "eval_samples": 8},
        training={"microbatch_size": 2},
        scheduler={"policy": "dssda"},
    )
    with SyncClient(app_factory(RecordingDispatcher(), preflight_timeout_s=3.0)) as client:
        assert client.post("/api/config/preflight", json=tiny_config(), headers=viewer).status_code == 200
        late = client.post("/api/config/preflight", json=huge, headers=viewer)
        assert late.status_code == 422 and "takes longer than 3 s" in late.json()["error"]["message"]
        assert client.get("/api/runs", headers=viewer).status_code == 200
        again = client.post("/api/config/preflight", json=tiny_config(), headers=viewer)
        assert again.status_code == 200 and again.json()["round"]["round"] == 0


def _files_config(train: str, **model: Any) -> dict[str, Any]:
    data = {"dataset": "files", "files": {"train": train}, "tokenizer": {"vocab_size": 64}}
    return tiny_config(model=model, data=data) if model else tiny_config(data=data)


def _bert_checkpoint(directory: Path, **keys: Any) -> None:
    directory.mkdir(parents=True)
    sizes = {"model_type": "bert", "hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 2}
    (directory / "config.json").write_text(json.dumps({**sizes, **keys}))


@pytest.mark.deployments("embedded")  # refused before any deployment-specific code: validation
def test_hostile_data_files_and_checkpoints_get_a_422_naming_the_field(hostile: Hostile) -> None:
    """The security trial's files: each was a 500, a hang or gigabytes of the API's memory."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = hostile.data_dir / "datasets"
    data.mkdir()
    repeated = pa.DictionaryArray.from_arrays(pa.array(np.zeros(2_000_001, dtype=np.int32)), pa.array(["ab"]))
    pq.write_table(pa.table({"text": repeated, "label": repeated}), data / "bomb.parquet", compression="zstd")
    (data / "deep.jsonl").write_text('{"text": "a", "label": 1}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    (data / "wide.csv").write_text(",".join(f"c{i}" for i in range(40_000)) + "\n")
    checkpoints = hostile.data_dir / "checkpoints"
    _bert_checkpoint(checkpoints / "layers", num_hidden_layers=10**6)
    _bert_checkpoint(checkpoints / "heads", num_attention_heads=0)
    _bert_checkpoint(checkpoints / "half", hidden_size=32.5)
    (checkpoints / "nested").mkdir()
    (checkpoints / "nested" / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    bert = {"source": "transformers", "architecture": "bert"}
    cases = [
        (_files_config("datasets/bomb.parquet"), "config.data.files.train", "has 2,000,001 rows"),
        (_files_config("datasets/deep.jsonl"), "config.data.files.train", "line 2 is nested deeper than"),
        (_files_config("datasets/wide.csv"), "config.data.files.train", "names 40,000 columns"),
        (
            tiny_config(model={**bert, "pretrained_path": "checkpoints/layers"}),
            "config.model.pretrained_path",
            "num_hidden_layers is 1000000",
        ),
        (
            tiny_config(model={**bert, "pretrained_path": "checkpoints/heads"}),
            "config.model.pretrained_path",
            "num_attention_heads is 0",
        ),
        (
            tiny_config(model={**bert, "pretrained_path": "checkpoints/half"}),
            "config.model.pretrained_path",
            "hidden_size is 32.5, not an integer",
        ),
        (
            tiny_config(model={**bert, "pretrained_path": "checkpoints/nested"}),
            "config.model.pretrained_path",
            "config.json is nested deeper than",
        ),
    ]
    viewer = hostile.api.as_("viewer")
    for config, field, fragment in cases:
        before = hostile.snapshot()
        response = hostile.api.client.post("/api/config/validate", json=config, headers=viewer)
        detail = next(
            d for d in hostile.check(response, 422, field)["error"]["details"] if d["field"] == field
        )
        assert fragment in detail["message"] and str(hostile.data_dir) not in response.text, detail
        assert hostile.snapshot() == before


@pytest.mark.deployments("embedded")  # the API process's own work: validation
def test_data_files_are_checked_in_a_child_with_a_deadline_and_a_memory_limit(
    app_factory: Callable[..., FastAPI],
    settings: Any,
    session_factory: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from collapipe_core.data import tables
    from tests.backend.client import SyncClient
    from tests.backend.conftest import add_user

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the API process parsed a data file")

    monkeypatch.setattr(tables, "parse_table", refuse)  # in this process only: checks run in a child
    data_dir = Path(settings.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    lines = "".join(f'{{"text": "row {i} of many", "label": {i % 2}}}\n' for i in range(150_000))
    (data_dir / "many.jsonl").write_text(lines)
    (data_dir / "few.jsonl").write_text("".join(lines.splitlines(keepends=True)[:200]))
    _, token = add_user(session_factory, "v", "viewer")
    viewer = {"Authorization": f"Bearer {token}"}
    small, big = _files_config("few.jsonl"), _files_config("many.jsonl")
    with SyncClient(app_factory(RecordingDispatcher(), check_memory_bytes=64 * 2**20)) as client:
        assert client.post("/api/config/validate", json=small, headers=viewer).status_code == 200
        large = client.post("/api/config/validate", json=big, headers=viewer)
        assert large.status_code == 422, large.text
        assert "needs more than the 64 MiB the server gives it" in large.json()["error"]["message"]
        assert client.get("/api/runs", headers=viewer).status_code == 200
        again = client.post("/api/config/preflight", json=small, headers=viewer)  # the other child
        assert again.status_code == 200 and again.json()["round"]["round"] == 0
        assert client.post("/api/config/validate", json=small, headers=viewer).status_code == 200
    # 900,000 rows (the most a file may hold is 1,000,000): well over 3 s of parsing on any machine
    # this suite runs on (the 150,000 of many.jsonl took under 3 s on an idle 2-core machine)
    rows = "".join(f'{{"text": "row {i} of many", "label": {i % 2}}}\n' for i in range(900_000))
    (data_dir / "huge.jsonl").write_text(rows)
    with SyncClient(app_factory(RecordingDispatcher(), validate_timeout_s=3.0)) as client:
        late = client.post("/api/config/validate", json=_files_config("huge.jsonl"), headers=viewer)
        assert late.status_code == 422 and "takes longer than 3 s" in late.json()["error"]["message"]
        assert client.post("/api/config/validate", json=tiny_config(), headers=viewer).status_code == 200
