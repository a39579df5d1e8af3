"""What ``collapipe serve`` does before it listens: migrate, create the first admin, check the bind."""

from __future__ import annotations

from pathlib import Path

from backend.db.engine import make_engine, make_session_factory
from backend.migrations import upgrade_to_head
from backend.settings import Settings
from backend.users import service as users


def _ensure_sqlite_dir(database_url: str) -> None:
    prefix = "sqlite:///"
    if database_url.startswith(prefix) and database_url != "sqlite:///:memory:":
        Path(database_url[len(prefix) :]).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)


def prepare(settings: Settings) -> list[str]:
    """Upgrade to head, bootstrap auth, refuse an unprotected public bind; returns lines to print."""
    _ensure_sqlite_dir(settings.database_url)
    upgrade_to_head(settings.database_url)
    settings.artifact_dir.mkdir(parents=True, exist_ok=True)
    token = settings.bootstrap_token.get_secret_value() if settings.bootstrap_token else None
    engine = make_engine(settings.database_url)
    try:
        with make_session_factory(engine)() as session:
            report = users.bootstrap(session, token)
            safe = users.auth_is_set_up(session, report.token_installed)
            session.commit()
    finally:
        engine.dispose()
    if not settings.is_loopback() and not safe:
        raise ValueError(
            f"refusing to listen on {settings.host}: auth is not set up. Start once on 127.0.0.1, log in "
            "and change the admin password (POST /api/auth/password), or set COLLAPIPE_BOOTSTRAP_TOKEN"
        )
    url = f"http://{settings.host}:{settings.port}"
    lines = [f"CollaPipe service on {url} (database {settings.database_url}, executor {settings.executor})"]
    if report.admin_password is not None:
        lines += [
            f"created the first admin: username {report.admin_username!r}, password {report.admin_password}",
            f"  (shown once) log in to the dashboard at {url}: it asks you to choose your own password first"
            ' (later: "Change password" in its header)',
        ]
    if report.token_installed:
        lines.append("COLLAPIPE_BOOTSTRAP_TOKEN is an admin API token: send 'Authorization: Bearer <token>'")
    return lines


def reset_password(settings: Settings, username: str) -> str:
    engine = make_engine(settings.database_url)
    try:
        with make_session_factory(engine)() as session:
            password = users.reset_password(session, username)
            session.commit()
            return password
    finally:
        engine.dispose()
