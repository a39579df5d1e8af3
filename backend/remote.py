"""``collapipe remote``: submit, list, watch and export runs of a CollaPipe server over HTTP, and
(``collapipe remote study ...``) submit, watch and export studies.

The server comes from --server or COLLAPIPE_SERVER (default http://127.0.0.1:8000), the API token
from --token or COLLAPIPE_TOKEN. Errors print the server's message and field details and exit 2.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from collapipe_core.cli import stdout_console
from collapipe_core.progress import progress_bar

remote_app = typer.Typer(no_args_is_help=True, help="Use a CollaPipe server: submit, ls, watch, export")
study_app = typer.Typer(no_args_is_help=True, help="Studies on a CollaPipe server: submit, watch, export")
remote_app.add_typer(study_app, name="study")
err_console = Console(stderr=True, soft_wrap=True)  # paths stay whole: a terminal wraps lines itself

Server = Annotated[str, typer.Option(envvar="COLLAPIPE_SERVER", help="server URL")]
Token = Annotated[str | None, typer.Option(envvar="COLLAPIPE_TOKEN", help="API token")]
JsonFlag = Annotated[bool, typer.Option("--json", help="print JSON")]
DEFAULT_SERVER = "http://127.0.0.1:8000"
SUBMIT_TIMEOUT_S = 300.0  # the server checks a config within its own deadline (60 s by default), and
# its first check after a start may wait for the checker process to come up
TERMINAL = ("succeeded", "failed", "cancelled")


def _client(server: str, token: str | None, timeout_s: float | None = 30.0) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=server.rstrip("/"), headers=headers, timeout=timeout_s)


def _fail(message: str, code: int = 2) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code=code)


def _checked(response: httpx.Response) -> httpx.Response:
    if response.is_success:
        return response
    try:
        error = response.json()["error"]
        details = error.get("details") or []
        lines = [error["message"]] + [_detail_line(d) for d in details if isinstance(d, dict)]
    except (ValueError, KeyError, TypeError):
        lines = [response.text[:500]]
    raise _fail(f"{response.status_code} from {response.request.url.path}: " + "\n".join(lines))


def _detail_line(detail: dict[str, Any]) -> str:
    """One field problem; a study's bad cell also names the cell, its base and values."""
    line = f"{detail['field']}: {detail['message']} (got {detail.get('value')!r})"
    if "cell" in detail:
        values = ", ".join(f"{k}={v!r}" for k, v in (detail.get("values") or {}).items())
        line = f"cell {detail['cell']} ({detail.get('base')}: {values}): {line}"
        if detail.get("seeds"):
            line += f" for seeds {detail['seeds']}"
    return f"  - {line}"


def _request(client: httpx.Client, method: str, path: str, **kwargs: Any) -> httpx.Response:
    try:
        return _checked(client.request(method, path, **kwargs))
    except httpx.TransportError as err:
        raise _fail(f"cannot reach {client.base_url}: {err}") from None


@remote_app.command()
def submit(
    config_path: Annotated[Path, typer.Argument(help="experiment config (YAML or JSON)")],
    server: Server = DEFAULT_SERVER,
    token: Token = None,
    json_output: JsonFlag = False,
    rounds: Annotated[int | None, typer.Option(help="override training.rounds")] = None,
) -> None:
    """Submit a config as a run and print the run id.

    The file is only parsed here and sent as written: the server validates it, reads the files it
    names from its own data directory and fills in the defaults."""
    from collapipe_core.cli import read_config
    from collapipe_core.validation import ConfigError

    try:
        config = read_config(config_path, {"training.rounds": rounds})
    except ConfigError as err:
        raise _fail(f"{config_path}: {err}") from None
    with _client(server, token, timeout_s=SUBMIT_TIMEOUT_S) as client:
        run = _request(client, "POST", "/api/runs", json={"config": config}).json()
    print(json.dumps({"run_id": run["id"]}) if json_output else run["id"])


@remote_app.command("ls")
def list_runs(
    server: Server = DEFAULT_SERVER,
    token: Token = None,
    json_output: JsonFlag = False,
    limit: Annotated[int, typer.Option(help="most recent runs to show")] = 50,
) -> None:
    """List the most recent runs."""
    with _client(server, token) as client:
        page = _request(client, "GET", "/api/runs", params={"limit": limit}).json()
    if json_output:
        print(json.dumps(page["items"]))
        return
    table = Table(title=f"runs ({page['total']} in all)")
    for column in ("id", "name", "status", "rounds", "policy", "executor", "created"):
        table.add_column(column)
    for r in page["items"]:
        table.add_row(
            str(r["id"]),
            r["name"],
            r["status"],
            f"{r['rounds_done']}/{r['total_rounds']}",
            r["policy"],
            r["executor"],
            r["created_at"][:19],
        )
    stdout_console().print(table)


def _sse(response: httpx.Response) -> Iterator[tuple[str | None, str, dict[str, Any]]]:
    """(id, event, data) of each event in a text/event-stream response."""
    event_id: str | None = None
    kind, data = "message", ""
    for line in response.iter_lines():
        if not line:
            if data:
                yield event_id, kind, json.loads(data)
            kind, data = "message", ""
        elif line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()


@remote_app.command()
def watch(
    run_id: Annotated[int, typer.Argument(help="run id")],
    server: Server = DEFAULT_SERVER,
    token: Token = None,
) -> None:
    """Follow a run's live stream with a progress bar; exit 0 if it succeeds, 1 otherwise."""
    with _client(server, token, timeout_s=None) as client:
        run = _request(client, "GET", f"/api/runs/{run_id}").json()
        status, last_id = run["status"], None
        with progress_bar(err_console) as progress:
            task = progress.add_task(run["name"], total=run["total_rounds"], completed=0, status=status)
            while status not in TERMINAL or last_id is None:
                headers: dict[str, str] = {"Last-Event-ID": last_id} if last_id else {}
                try:
                    with client.stream("GET", f"/api/runs/{run_id}/events", headers=headers) as response:
                        if response.status_code == 204:
                            break
                        _checked(response)
                        for event_id, kind, data in _sse(response):
                            last_id = event_id or last_id
                            if kind == "round":
                                r = data["round"]
                                progress.update(
                                    task,
                                    completed=r["round"] + 1,
                                    status=f"latency {r['latency_s'] or 0:.3f} s",
                                )
                            elif kind == "status":
                                status = data["status"]
                                progress.update(task, completed=data["rounds_done"], status=status)
                    if last_id is None:
                        break
                except httpx.TransportError:
                    continue  # reconnect with Last-Event-ID
        final = _request(client, "GET", f"/api/runs/{run_id}").json()
    stdout_console().print(
        f"run {run_id}: {final['status']} ({final['rounds_done']}/{final['total_rounds']} rounds)"
        + (f" — {final['error']}" if final.get("error") else "")
    )
    raise typer.Exit(code=0 if final["status"] == "succeeded" else 1)


@remote_app.command()
def export(
    run_id: Annotated[int, typer.Argument(help="run id")],
    server: Server = DEFAULT_SERVER,
    token: Token = None,
    format: Annotated[str, typer.Option(help="csv | parquet")] = "csv",
    table: Annotated[str, typer.Option(help="rounds | devices")] = "rounds",
    model: Annotated[
        bool,
        typer.Option(
            "--model",
            help="download the trained model instead: a tar archive of run-<id>-model/ (docs/models.md)",
        ),
    ] = False,
    merged: Annotated[
        bool, typer.Option("--merged", help="with --model: a LoRA run's adapter merged into its base")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            help="file to write (default run-<id>-<table>.<format>, or run-<id>-model[-merged].tar)"
        ),
    ] = None,
) -> None:
    """Download a run's records as CSV or Parquet, or (--model) its trained model."""
    if model:
        _download_model(run_id, server, token, merged, out)
        return
    if merged:
        raise _fail("--merged goes with --model")
    with _client(server, token, timeout_s=300) as client:
        response = _request(
            client, "GET", f"/api/runs/{run_id}/export", params={"format": format, "table": table}
        )
    path = out or Path(f"run-{run_id}-{table}.{format}")
    path.write_bytes(response.content)
    err_console.print(f"wrote {path} ({len(response.content)} bytes)", highlight=False)


MODEL_TRIES = 20  # 429: the server builds another model; it says when to ask again


def _download_model(run_id: int, server: str, token: str | None, merged: bool, out: Path | None) -> None:
    """Stream the run's model archive to ``out`` (through a temporary file: a failed download leaves
    nothing); the server may need a moment to build it, and asks to wait while it builds another."""
    path = out or Path(f"run-{run_id}-model{'-merged' if merged else ''}.tar")
    partial = path.with_name(path.name + ".part")
    params = {"merged": "true"} if merged else {}
    with _client(server, token, timeout_s=None) as client:
        for _ in range(MODEL_TRIES):
            try:
                with client.stream("GET", f"/api/runs/{run_id}/model", params=params) as response:
                    if response.status_code == 429:
                        wait_s = float(response.headers.get("retry-after", "5"))
                        err_console.print(f"the server is exporting another model; again in {wait_s:g} s")
                        time.sleep(wait_s)
                        continue
                    if not response.is_success:
                        response.read()
                        _checked(response)
                    size = _save_stream(response, partial)
                    break
            except httpx.TransportError as err:
                partial.unlink(missing_ok=True)
                raise _fail(f"cannot download from {client.base_url}: {err}") from None
        else:
            raise _fail("the server stayed busy exporting other models; try again later")
    declared = int(response.headers.get("content-length", size))
    if size != declared:
        partial.unlink(missing_ok=True)
        raise _fail(f"the download ended after {size} of {declared} bytes; try again")
    partial.replace(path)
    err_console.print(f"wrote {path} ({size} bytes)", highlight=False)


def _save_stream(response: httpx.Response, path: Path) -> int:
    size = 0
    with path.open("wb") as handle:
        for chunk in response.iter_bytes():
            handle.write(chunk)
            size += len(chunk)
    return size


# -- studies ---------------------------------------------------------------------------------------


@study_app.command("submit")
def submit_study(
    study_path: Annotated[Path, typer.Argument(help="study file (YAML or JSON; docs/studies.md)")],
    server: Server = DEFAULT_SERVER,
    token: Token = None,
    json_output: JsonFlag = False,
) -> None:
    """Submit a study file (config_file read relative to it); print the study id or every bad cell."""
    import yaml

    from backend.studies.presets import load_study_file

    try:
        _description, body = load_study_file(study_path)
    except (OSError, ValueError, TypeError, yaml.YAMLError) as err:
        raise _fail(f"{study_path}: {err}") from None
    with _client(server, token) as client:
        study = _request(client, "POST", "/api/studies", json=body).json()
    progress = study["progress"]
    if json_output:
        print(
            json.dumps(
                {"study_id": study["id"], "num_cells": study["num_cells"], "num_runs": progress["runs_total"]}
            )
        )
        return
    print(study["id"])
    err_console.print(
        f"study {study['id']} ({study['name']}): {study['num_cells']} cells, {progress['runs_total']} runs",
        highlight=False,
    )


def _study_progress(client: httpx.Client, study_id: int) -> dict[str, Any]:
    progress: dict[str, Any] = _request(client, "GET", f"/api/studies/{study_id}").json()["progress"]
    return progress


class _StudyBars:
    """The human view of ``study watch``: runs and rounds as progress bars on stderr."""

    def __init__(self, progress: Progress, state: dict[str, Any]) -> None:
        self.bars = progress
        self.runs = progress.add_task("runs", total=state["runs_total"], status=state["status"])
        self.rounds = progress.add_task("rounds", total=state["rounds_total"], status="")

    def show(self, state: dict[str, Any]) -> None:
        self.bars.update(self.runs, completed=state["runs_done"], status=state["status"])
        self.bars.update(self.rounds, completed=state["rounds_done"])

    def failed(self, run_id: int, error: str | None) -> None:
        self.bars.console.print(f"run {run_id} failed: {error}", highlight=False)


class _StudyLines:
    """``study watch --json``: one JSON object per line on stdout for each change of the study's
    progress (``{"study_id", "progress"}``) and each failed run (``{"study_id", "run_failed"}``)."""

    def __init__(self, study_id: int) -> None:
        self.study_id = study_id
        self.shown: dict[str, Any] | None = None

    def show(self, state: dict[str, Any]) -> None:
        if state != self.shown:
            self.shown = state
            print(json.dumps({"study_id": self.study_id, "progress": state}), flush=True)

    def failed(self, run_id: int, error: str | None) -> None:
        line = {"study_id": self.study_id, "run_failed": {"run_id": run_id, "error": error}}
        print(json.dumps(line), flush=True)


@contextmanager
def _study_view(
    study_id: int, state: dict[str, Any], json_output: bool
) -> Iterator[_StudyBars | _StudyLines]:
    if json_output:
        yield _StudyLines(study_id)
        return
    with progress_bar(err_console) as progress:
        yield _StudyBars(progress, state)


@study_app.command("watch")
def watch_study(
    study_id: Annotated[int, typer.Argument(help="study id")],
    server: Server = DEFAULT_SERVER,
    token: Token = None,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json",
            help="print one JSON object per line for each progress update and failed run, then "
            '{"study_id", "final": progress}',
        ),
    ] = False,
) -> None:
    """Follow a study's runs and rounds until every run ends; exit 0 if all succeeded, 1 otherwise."""
    with _client(server, token, timeout_s=None) as client:
        study = _request(client, "GET", f"/api/studies/{study_id}").json()
        state, last_id = study["progress"], study["last_event_id"]
        with _study_view(study_id, state, json_output) as view:
            view.show(state)
            while state["runs_done"] < state["runs_total"]:
                try:
                    with client.stream(
                        "GET", f"/api/studies/{study_id}/events", headers={"Last-Event-ID": last_id}
                    ) as response:
                        if response.status_code != 204:
                            _checked(response)
                            for event_id, kind, data in _sse(response):
                                last_id = event_id or last_id
                                if kind == "study":
                                    view.show(data)
                                elif kind == "status" and data["status"] == "failed":
                                    view.failed(data["run_id"], data["error"])
                except httpx.TransportError:
                    pass  # reconnect after the last event seen
                state = _study_progress(client, study_id)  # the stream ended: every run finished?
                view.show(state)
    if json_output:
        print(json.dumps({"study_id": study_id, "final": state}), flush=True)
    else:
        counts = ", ".join(f"{n} {status}" for status, n in sorted(state["runs_by_status"].items()))
        stdout_console().print(
            f"study {study_id}: {state['status']} ({state['runs_done']}/{state['runs_total']} runs: "
            f"{counts}; {state['rounds_done']}/{state['rounds_total']} rounds)",
            highlight=False,
        )
    raise typer.Exit(code=0 if state["status"] == "succeeded" else 1)


@study_app.command("export")
def export_study(
    study_id: Annotated[int, typer.Argument(help="study id")],
    server: Server = DEFAULT_SERVER,
    token: Token = None,
    format: Annotated[str, typer.Option(help="csv | parquet | html")] = "csv",
    out: Annotated[Path | None, typer.Option(help="file to write (default study-<id>.<format>)")] = None,
) -> None:
    """Download a study's summary table (CSV, Parquet) or its self-contained HTML report."""
    with _client(server, token, timeout_s=300) as client:
        response = _request(client, "GET", f"/api/studies/{study_id}/export", params={"format": format})
    path = out or Path(f"study-{study_id}.{format}")
    path.write_bytes(response.content)
    err_console.print(f"wrote {path} ({len(response.content)} bytes)", highlight=False)
