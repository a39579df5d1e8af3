"""``collapipe serve`` and ``collapipe remote ...``: the service's command line.

``main`` is the ``collapipe`` console script once the service is installed: the core's commands plus
``serve`` and ``remote`` (``collapipe_core`` itself never imports this package).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from backend.remote import remote_app
from backend.settings import Settings

serve_app = typer.Typer(add_completion=False, help="Run the CollaPipe service")
err_console = Console(stderr=True, soft_wrap=True)  # never wrap the one-time password


@serve_app.command("serve")
def serve(
    host: Annotated[str | None, typer.Option(help="address to bind (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default 8000)")] = None,
    database_url: Annotated[str | None, typer.Option(help="default sqlite:///./collapipe.db")] = None,
    executor: Annotated[str | None, typer.Option(help="local | celery")] = None,
    artifact_dir: Annotated[Path | None, typer.Option(help="checkpoint directory (default ./runs)")] = None,
    workers: Annotated[
        int | None, typer.Option(help="API processes (default 1; more only with --executor celery)")
    ] = None,
) -> None:
    """Upgrade the database, create the first admin if there is none, and serve the API."""
    import uvicorn

    from backend.app import create_app
    from backend.bootstrap import prepare

    overrides: dict[str, Any] = {
        "host": host,
        "port": port,
        "database_url": database_url,
        "executor": executor,
        "artifact_dir": artifact_dir,
        "api_workers": workers,
    }
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
        check_workers(settings)
        report = prepare(settings)
    except ValueError as err:
        err_console.print(f"[bold red]error:[/] {err}", highlight=False)
        raise typer.Exit(code=2) from None
    for line in report:
        err_console.print(line, highlight=False)
    if settings.api_workers > 1:
        # each process builds its app from the environment: hand the command line's choices down
        for name, value in overrides.items():
            if value is not None:
                os.environ[f"COLLAPIPE_{name.upper()}"] = str(value)
        uvicorn.run(
            "backend.app:create_app",
            factory=True,
            workers=settings.api_workers,
            host=settings.host,
            port=settings.port,
            timeout_graceful_shutdown=5,
            log_level="info",
        )
        return
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        timeout_graceful_shutdown=5,
        log_level="info",
    )


def check_workers(settings: Settings) -> None:
    """Several API processes need the Celery executor: the local one dispatches inside its process."""
    if settings.api_workers > 1 and settings.executor != "celery":
        raise ValueError(
            f"workers={settings.api_workers} needs executor=celery (executor is {settings.executor!r}): "
            "the local executor executes runs inside the one API process; use --workers 1, or Celery workers"
        )


@serve_app.command("reset-password")
def reset_password(
    username: Annotated[str, typer.Argument(help="the user whose password to reset")],
    database_url: Annotated[str | None, typer.Option(help="default sqlite:///./collapipe.db")] = None,
) -> None:
    """Give a user a new random password (printed once; they must change it)."""
    from backend.bootstrap import reset_password as reset

    overrides: dict[str, Any] = {"database_url": database_url} if database_url else {}
    settings = Settings(**overrides)
    try:
        password = reset(settings, username)
    except ValueError as err:
        err_console.print(f"[bold red]error:[/] {err}", highlight=False)
        raise typer.Exit(code=2) from None
    err_console.print(f"new password of {username}: {password}", highlight=False)


def main() -> None:
    """The ``collapipe`` command: the core's commands plus ``serve``, ``reset-password``, ``remote``."""
    from collapipe_core.cli import app

    for command in serve_app.registered_commands:
        app.registered_commands.append(command)
    app.add_typer(remote_app, name="remote")
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
