"""Uploads never write through a symbolic link, never replace another user's file or a file a queued
or running run names, stay within the per-user and total quotas, the file-count cap and the disk's
free space, and cost the same however many files the data directory holds. A client that goes away
mid-upload leaves nothing and no error in the log; a file deleted while the directory is listed is
left out of the listing."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker

from backend.files import service
from tests.backend.builders import insert_run, tiny_config
from tests.backend.client import SyncClient
from tests.backend.conftest import Api, RecordingDispatcher, add_user

pytestmark = pytest.mark.deployments("embedded")  # files live on disk; the uploaders' rows in SQLite

CSV = b"text,label\nhi,1\n"


def _put(client: Any, headers: dict[str, str], name: str, body: bytes = CSV, **params: Any) -> Any:
    headers = {**headers, "content-type": "application/octet-stream"}
    return client.request("PUT", f"/api/files/{name}", content=body, headers=headers, params=params)


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


@pytest.fixture
def data_dir(settings: Any) -> Path:
    path = Path(settings.data_dir)
    (path / "checkpoints").mkdir(parents=True)
    (path / "datasets").mkdir()
    return path


def test_an_upload_never_writes_through_a_symlinked_folder(api: Api, data_dir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config.json").write_text('{"original": true}')
    (data_dir / "checkpoints" / "linked").symlink_to(outside, target_is_directory=True)
    operator, admin = api.as_("operator"), api.as_("admin")
    for headers in (operator, admin):
        for name in ("checkpoints/linked/config.json", "checkpoints/linked/vocab.txt"):
            refused = _put(api.client, headers, name, b'{"written": "through symlink"}', overwrite="true")
            assert refused.status_code == 409, refused.text
            assert "symbolic link" in refused.json()["error"]["message"]
    assert (outside / "config.json").read_text() == '{"original": true}'
    assert sorted(p.name for p in outside.iterdir()) == ["config.json"]


def test_a_symlinked_folder_or_file_of_the_data_directory_is_refused(
    api: Api, data_dir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.csv").write_bytes(b"secret")
    (data_dir / "traces").symlink_to(outside, target_is_directory=True)
    (data_dir / "datasets" / "x.csv").symlink_to(outside / "x.csv")
    operator = api.as_("admin")
    assert _put(api.client, operator, "traces/t.csv").status_code == 409
    assert _put(api.client, operator, "datasets/x.csv", overwrite="true").status_code == 409
    assert (
        sorted(p.name for p in outside.iterdir()) == ["x.csv"]
        and (outside / "x.csv").read_bytes() == b"secret"
    )


def test_only_the_uploader_or_an_admin_replaces_a_file(
    api: Api, data_dir: Path, session_factory: sessionmaker[Session]
) -> None:
    _, other = add_user(session_factory, "op2", "operator")
    op1, op2, admin = api.as_("operator"), {"Authorization": f"Bearer {other}"}, api.as_("admin")
    assert _put(api.client, op1, "datasets/x.csv").status_code == 201
    exists = _put(api.client, op2, "datasets/x.csv")
    assert exists.status_code == 409 and exists.json()["error"]["code"] == "file_exists"
    refused = _put(api.client, op2, "datasets/x.csv", b"text,label\nPOISON,1\n", overwrite="true")
    assert refused.status_code == 403 and "operator" in refused.json()["error"]["message"]
    assert (data_dir / "datasets" / "x.csv").read_bytes() == CSV
    assert (
        _put(api.client, op1, "datasets/x.csv", b"text,label\nmine,1\n", overwrite="true").status_code == 201
    )
    assert (
        _put(api.client, admin, "datasets/x.csv", b"text,label\nadmin,1\n", overwrite="true").status_code
        == 201
    )
    # a checkpoint is one unit: no file may be added to another user's
    assert _put(api.client, op1, "checkpoints/m/config.json", b"{}").status_code == 201
    assert _put(api.client, op2, "checkpoints/m/vocab.txt", b"a\n").status_code == 403
    assert not (data_dir / "checkpoints" / "m" / "vocab.txt").exists()
    # a file placed on the server by other means has no uploader: only an admin replaces it
    (data_dir / "datasets" / "placed.csv").write_bytes(CSV)
    assert _put(api.client, op1, "datasets/placed.csv", overwrite="true").status_code == 403
    listed = {f["name"]: f["uploaded_by"] for f in api.client.get("/api/files", headers=op1).json()}
    assert listed == {"checkpoints/m": "operator", "datasets/placed.csv": None, "datasets/x.csv": "admin"}


def test_a_file_a_queued_or_running_run_names_is_not_replaced(api: Api, data_dir: Path) -> None:
    operator = api.as_("operator")
    assert _put(api.client, operator, "datasets/used.csv").status_code == 201
    config = tiny_config(
        model={"kind": "classifier", "seq_len": 16},
        data={"dataset": "files", "files": {"train": "datasets/used.csv"}, "tokenizer": {"kind": "bpe"}},
    )
    run_id = insert_run(api.session_factory, config, status="running")
    refused = _put(
        api.client, api.as_("admin"), "datasets/used.csv", b"text,label\nnew,1\n", overwrite="true"
    )
    assert refused.status_code == 409 and f"run {run_id}" in refused.json()["error"]["message"]
    assert (data_dir / "datasets" / "used.csv").read_bytes() == CSV
    insert_run(api.session_factory, config, status="succeeded")  # finished runs do not hold it
    with api.session_factory() as session:
        from backend.db.models import Run

        session.get_one(Run, run_id).status = "failed"
        session.commit()
    assert (
        _put(api.client, operator, "datasets/used.csv", b"text,label\nnew,1\n", overwrite="true").status_code
        == 201
    )


@pytest.fixture
def limited(
    app_factory: Callable[..., FastAPI], session_factory: sessionmaker[Session], data_dir: Path
) -> Iterator[Callable[..., tuple[SyncClient, dict[str, dict[str, str]]]]]:
    clients: list[SyncClient] = []

    def make(**limits: Any) -> tuple[SyncClient, dict[str, dict[str, str]]]:
        headers = {}
        for username in ("op1", "op2"):
            _, token = add_user(session_factory, f"{username}-{len(clients)}", "operator")
            headers[username] = {"Authorization": f"Bearer {token}"}
        client = SyncClient(app_factory(RecordingDispatcher(), **limits))
        clients.append(client)
        return client, headers

    yield make
    for client in clients:
        client.close()


def test_a_user_quota_counts_their_uploads_and_replacing_frees_the_old_size(
    limited: Callable[..., tuple[SyncClient, dict[str, dict[str, str]]]], data_dir: Path
) -> None:
    client, users = limited(max_user_data_bytes=1000)
    op1 = users["op1"]
    assert _put(client, op1, "datasets/a.csv", b"x" * 600).status_code == 201
    over = _put(client, op1, "datasets/b.csv", b"x" * 600)
    assert over.status_code == 413 and "COLLAPIPE_MAX_USER_DATA_BYTES" in over.json()["error"]["message"]
    assert _put(client, op1, "datasets/a.csv", b"x" * 900, overwrite="true").status_code == 201
    assert _put(client, users["op2"], "datasets/b.csv", b"x" * 600).status_code == 201  # their own quota
    assert _tree(data_dir) == ["checkpoints", "datasets", "datasets/a.csv", "datasets/b.csv"]


def test_the_total_quota_the_file_count_and_free_space_are_kept(
    limited: Callable[..., tuple[SyncClient, dict[str, dict[str, str]]]],
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, users = limited(max_data_bytes=1000, max_data_files=2)
    op1, op2 = users["op1"], users["op2"]
    assert _put(client, op1, "datasets/a.csv", b"x" * 600).status_code == 201
    over = _put(client, op2, "datasets/b.csv", b"x" * 600)
    assert over.status_code == 413 and "COLLAPIPE_MAX_DATA_BYTES" in over.json()["error"]["message"]
    assert _put(client, op2, "datasets/b.csv", b"x" * 10).status_code == 201
    full = _put(client, op2, "datasets/c.csv", b"x" * 10)
    assert full.status_code == 409 and "COLLAPIPE_MAX_DATA_FILES" in full.json()["error"]["message"]
    monkeypatch.setattr(service, "free_bytes", lambda _path: 2**30 + 100)  # the disk: just over 1 GiB free
    low = _put(client, op1, "datasets/a.csv", b"x" * 200, overwrite="true")
    assert low.status_code == 413 and "COLLAPIPE_MIN_FREE_DISK_BYTES" in low.json()["error"]["message"]
    assert _tree(data_dir) == ["checkpoints", "datasets", "datasets/a.csv", "datasets/b.csv"]
    assert (data_dir / "datasets" / "a.csv").read_bytes() == b"x" * 600


def test_an_upload_does_not_list_the_data_directory(
    api: Api, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its cost does not grow with the number of files stored (each upload listed them all)."""

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("an upload listed the data directory")

    monkeypatch.setattr(service, "list_files", refuse)
    created = _put(api.client, api.as_("operator"), "checkpoints/m/config.json", b"{}")
    assert created.status_code == 201, created.text
    assert (created.json()["name"], created.json()["files"], created.json()["complete"]) == (
        "checkpoints/m",
        ["config.json"],
        True,
    )


def test_a_file_deleted_while_listing_is_left_out(
    api: Api, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (
        "datasets/a.csv",
        "datasets/gone.csv",
        "checkpoints/m/config.json",
        "checkpoints/m/vocab.txt",
    ):
        assert (
            _put(api.client, api.as_("operator"), name, b"{}" if "json" in name else CSV).status_code == 201
        )
    real = os.stat
    seen: set[str] = set()

    def racing(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        """These two files are there when first looked at, and deleted by an admin right after."""
        if str(path).endswith(("gone.csv", "vocab.txt")):
            if str(path) in seen:
                raise FileNotFoundError(errno.ENOENT, "deleted by an admin meanwhile", str(path))
            seen.add(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", racing)
    listed = api.client.get("/api/files", headers=api.as_("viewer"))
    assert listed.status_code == 200, listed.text
    assert [(f["name"], f["files"]) for f in listed.json()] == [
        ("datasets/a.csv", None),
        ("checkpoints/m", ["config.json"]),
    ]


def test_a_client_that_goes_away_mid_upload_leaves_nothing_and_no_error_log(
    api: Api, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token = api.as_("operator")["Authorization"].encode()
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "PUT", "scheme": "http",
        "path": "/api/files/datasets/partial.csv", "raw_path": b"/api/files/datasets/partial.csv",
        "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1), "server": ("testserver", 80),
        "headers": [(b"host", b"testserver"), (b"authorization", token), (b"content-length", b"1000000")],
    }  # fmt: skip
    messages = [
        {"type": "http.request", "body": b"x" * 1000, "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if len(messages) > 1 else messages[0]

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def call() -> None:
        await api.app(scope, receive, send)

    with caplog.at_level(logging.INFO):
        api.client.portal.call(call)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert _tree(data_dir) == ["checkpoints", "datasets"]
