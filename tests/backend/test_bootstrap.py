"""What `collapipe serve` does before listening: migrate, first admin, bootstrap token, bind check."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from backend.app import create_app
from backend.bootstrap import prepare, reset_password
from backend.settings import Settings
from tests.backend.client import SyncClient
from tests.backend.conftest import RecordingDispatcher

TOKEN = "bootstrap-token-0123456789abcdef"


def _settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path}/db/collapipe.db",
        artifact_dir=tmp_path / "runs",
        _env_file=None,
        **values,  # type: ignore[arg-type]
    )


def test_first_start_creates_an_admin_once_and_prints_how_to_log_in(tmp_path: Path) -> None:
    lines = prepare(_settings(tmp_path))
    password = next(line for line in lines if "created the first admin" in line).rsplit(" ", 1)[1]
    assert any("dashboard at http://127.0.0.1:8000" in line and '"Change password"' in line for line in lines)
    assert not any("created the first admin" in line for line in prepare(_settings(tmp_path)))
    with SyncClient(create_app(_settings(tmp_path), dispatcher=RecordingDispatcher())) as client:
        me = client.post("/api/auth/login", json={"username": "admin", "password": password}).json()
        assert me["role"] == "admin" and me["must_change_password"] is True


def test_the_bootstrap_token_is_an_admin_token_stored_hashed(tmp_path: Path) -> None:
    settings = _settings(tmp_path, bootstrap_token=SecretStr(TOKEN))
    prepare(settings)
    prepare(settings)  # idempotent
    assert TOKEN.encode() not in (tmp_path / "db" / "collapipe.db").read_bytes()
    with SyncClient(create_app(settings, dispatcher=RecordingDispatcher())) as client:
        tokens = client.get("/api/tokens", headers={"Authorization": f"Bearer {TOKEN}"}).json()
        assert [t["name"] for t in tokens] == ["bootstrap"]


def test_a_public_bind_is_refused_until_auth_is_set_up(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"refusing to listen on 0\.0\.0\.0"):
        prepare(_settings(tmp_path, host="0.0.0.0"))
    assert prepare(_settings(tmp_path, host="0.0.0.0", bootstrap_token=SecretStr(TOKEN)))
    assert prepare(_settings(tmp_path, host="127.0.0.1"))


def test_a_public_bind_is_allowed_once_the_admin_chose_a_password(tmp_path: Path) -> None:
    prepare(_settings(tmp_path))
    password = reset_password(_settings(tmp_path), "admin")
    with SyncClient(create_app(_settings(tmp_path), dispatcher=RecordingDispatcher())) as client:
        client.post("/api/auth/login", json={"username": "admin", "password": password})
        changed = client.post(
            "/api/auth/password",
            json={"current_password": password, "new_password": "a new secret"},
            headers={"X-CollaPipe": "1"},  # as the dashboard sends with its session cookie
        )
        assert changed.status_code == 204
    assert prepare(_settings(tmp_path, host="0.0.0.0"))


def test_short_bootstrap_tokens_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 16 characters"):
        prepare(_settings(tmp_path, bootstrap_token=SecretStr("short")))


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("0.0.0.0", False),
        ("10.1.2.3", False),
        ("example.org", False),
    ],
)
def test_loopback_detection(host: str, loopback: bool) -> None:
    assert Settings(host=host, _env_file=None).is_loopback() is loopback
