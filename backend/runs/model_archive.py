"""A run's trained model as a tar archive: the rules and the cache behind ``GET /api/runs/{id}/model``.

The model of a succeeded or cancelled run that trained weights is exported
(:mod:`collapipe_core.export`) from the run's current checkpoint — the file its row names, as
``backend.runtime.checkpoints`` reads it (only the latest checkpoint of a run exists) — into a tar
archive of one folder, ``run-<id>-model/`` (``run-<id>-model-merged/`` for a LoRA adapter merged into
its base). The archive is cached in the run's artifact directory as ``model-<checkpoint>.tar`` (or
``model-<checkpoint>-merged.tar``): later downloads of the same checkpoint read the file, a new
checkpoint (the run resumed) gives a new archive and the old ones are removed; deleting the run removes
them with its directory. Archives are written under a temporary name and renamed: a reader never sees
a partial one, and two API processes building the same one at once only repeat the work.

Limits: an archive past ``max_bytes`` (COLLAPIPE_MAX_EXPORT_BYTES) is refused (413) — checked on the
weights before anything is built and on the archive after. Building holds the model in the API
process's memory (the checkpoint's tensors are mapped from the file, its optimizer states never read),
so an API process builds one archive at a time; a request that finds another build under way gets 429
with Retry-After (a cached archive is served at once).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from anyio import to_thread
from pydantic import ValidationError

from backend.db.engine import SessionFactory
from backend.errors import Conflict, InvalidInput, NotFound, TooManyRequests, Unavailable
from backend.runs import repository as repo
from backend.runtime.checkpoints import current_checkpoint
from backend.runtime.execution import checkpoint_dir_for
from collapipe_core.checkpoint import read_checkpoint
from collapipe_core.config import ExperimentConfig
from collapipe_core.workspace import Workspace

MEDIA_TYPE = "application/x-tar"
SERVED_STATUSES = ("succeeded", "cancelled")
CHUNK_BYTES = 2**20
RETRY_AFTER_S = 5
_building = threading.Lock()  # one archive built at a time per API process


class ArchiveTooLarge(InvalidInput):
    status_code, code = 413, "payload_too_large"


@dataclass(frozen=True)
class ModelArchive:
    """An archive ready to stream: its open file, size and the name a download saves it as."""

    file: IO[bytes]
    size_bytes: int
    filename: str

    def chunks(self) -> Iterator[bytes]:
        """The archive's bytes, a chunk at a time; closes the file at the end."""
        with self.file:
            while chunk := self.file.read(CHUNK_BYTES):
                yield chunk


@dataclass(frozen=True)
class _Source:
    """What the export needs of the run's row, read with a short session of its own."""

    run_id: int
    status: str
    executor: str
    config: dict[str, Any]
    checkpoint: str | None
    rounds_done: int


async def model_archive(
    session_factory: SessionFactory,
    run_id: int,
    *,
    merged: bool,
    artifact_dir: Path,
    workspace: Workspace,
    max_bytes: int,
) -> ModelArchive:
    """The archive of run ``run_id``'s model (a LoRA run's adapter, or with ``merged`` the adapter
    merged into its base), built on first request; no database connection is held meanwhile."""
    source = await to_thread.run_sync(_read_run, session_factory, run_id)
    run_dir = checkpoint_dir_for(artifact_dir, run_id)
    return await to_thread.run_sync(_archive, source, merged, run_dir, workspace, max_bytes)


def _read_run(session_factory: SessionFactory, run_id: int) -> _Source:
    with session_factory() as session:
        run = repo.get(session, run_id)
        if run is None:
            raise NotFound(f"no run with id {run_id}")
        return _Source(run.id, run.status, run.executor, run.config, run.checkpoint, run.rounds_done)


def _archive(
    source: _Source, merged: bool, run_dir: Path, workspace: Workspace, max_bytes: int
) -> ModelArchive:
    from collapipe_core.export import NothingToExport, check_exportable

    run_id = source.run_id
    if source.status not in SERVED_STATUSES:
        raise Conflict(
            f"run {run_id} is {source.status}; its model is served once it has succeeded or been cancelled"
        )
    try:  # read as checked at launch: an export needs the model and the data, not the policy or budgets
        config = ExperimentConfig.model_validate(source.config)
    except ValidationError as err:
        raise Conflict(f"the model of run {run_id} cannot be rebuilt on this server: {err}") from None
    try:
        check_exportable(config, merged)
    except NothingToExport as err:
        detail = {"field": "executor", "value": config.executor, "message": str(err)}
        raise InvalidInput(f"run {run_id} has no model: {err}", [detail]) from None
    except ValueError as err:
        raise InvalidInput(
            f"run {run_id}: {err}", [{"field": "merged", "value": True, "message": str(err)}]
        ) from None
    checkpoint = current_checkpoint(run_dir, source.checkpoint)
    if checkpoint is None:
        raise Conflict(
            f"run {run_id} ended before its first round was checkpointed: it has no trained weights"
        )
    suffix = "-merged" if merged else ""
    target = run_dir / f"model-{checkpoint.stem}{suffix}.tar"
    filename = f"run-{run_id}-model{suffix}.tar"
    cached = _opened(target, max_bytes, run_id, filename)
    if cached is not None:
        return cached
    if not _building.acquire(blocking=False):
        raise TooManyRequests(
            "this server is exporting another model; try again in a few seconds", RETRY_AFTER_S
        )
    try:
        cached = _opened(target, max_bytes, run_id, filename)  # built while we waited for the turn
        if cached is not None:
            return cached
        _build(
            config, checkpoint, target, f"run-{run_id}-model{suffix}", merged, workspace, max_bytes, run_id
        )
    finally:
        _building.release()
    built = _opened(target, max_bytes, run_id, filename)
    if built is None:  # removed meanwhile: the run was deleted, or another checkpoint replaced it
        raise Conflict(f"run {run_id} changed while its model was exported; try again")
    return built


def _opened(target: Path, max_bytes: int, run_id: int, filename: str) -> ModelArchive | None:
    """The cached archive opened (held open: a later export may remove the name), or None."""
    try:
        handle = target.open("rb")
    except FileNotFoundError:
        return None
    size = os.fstat(handle.fileno()).st_size
    if size > max_bytes:
        handle.close()
        raise _too_large(run_id, size, max_bytes, "its archive is")
    return ModelArchive(handle, size, filename)


def _too_large(run_id: int, size: int, max_bytes: int, what: str) -> ArchiveTooLarge:
    message = (
        f"the model of run {run_id} is too large to download from this server: {what} {size:,} bytes, past "
        f"COLLAPIPE_MAX_EXPORT_BYTES ({max_bytes:,}); ask the operator to raise it, or export it where the "
        "run's artifacts are with collapipe_core.export.export_model"
    )
    return ArchiveTooLarge(
        message, [{"field": "run", "value": run_id, "message": "past COLLAPIPE_MAX_EXPORT_BYTES"}]
    )


def _build(
    config: ExperimentConfig,
    checkpoint: Path,
    target: Path,
    root: str,
    merged: bool,
    workspace: Workspace,
    max_bytes: int,
    run_id: int,
) -> None:
    """Export the checkpoint's model and write its archive as ``target`` (whole or not at all)."""
    from collapipe_core.export import TooLargeToExport, export_model

    try:
        state = read_checkpoint(checkpoint, mmap=True)["executor"]
    except FileNotFoundError:
        raise Conflict(f"run {run_id} changed while its model was exported (resumed?); try again") from None
    scratch = target.with_name(f".{target.stem}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        try:
            export_model(config, state, scratch / root, workspace, merge_adapter=merged, max_bytes=max_bytes)
        except TooLargeToExport as err:
            raise _too_large(run_id, err.size_bytes, max_bytes, "its weights alone are") from None
        except ValueError as err:  # the data or the pretrained base it needs cannot be read here any more
            raise Conflict(f"the model of run {run_id} cannot be rebuilt on this server: {err}") from None
        archive = scratch.with_suffix(".tar")
        _write_tar(scratch, root, archive)
        size = archive.stat().st_size
        if size > max_bytes:
            raise _too_large(run_id, size, max_bytes, "its archive is")
        os.replace(archive, target)
    except OSError as err:
        raise Unavailable(
            f"cannot write the model archive of run {run_id} into its artifact directory "
            f"({err.strerror or type(err).__name__}): the API needs write access to COLLAPIPE_ARTIFACT_DIR"
        ) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        with contextlib.suppress(OSError):
            scratch.with_suffix(".tar").unlink(missing_ok=True)
    _remove_stale(target)


def _write_tar(scratch: Path, root: str, archive: Path) -> None:
    """``scratch/root`` as a tar of ``root/...`` (sorted, owner and times zeroed: the same model gives
    the same bytes), each file streamed from disk."""
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in [scratch / root, *sorted((scratch / root).rglob("*"))]:
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(scratch)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            info.mode = 0o755 if info.isdir() else 0o644
            if info.isdir():
                tar.addfile(info)
                continue
            with path.open("rb") as handle:
                tar.addfile(info, handle)


def _remove_stale(target: Path) -> None:
    """Archives of the run's earlier checkpoints (the run was resumed since they were built)."""
    current = target.name.removesuffix("-merged.tar").removesuffix(".tar")
    for path in target.parent.glob("model-*.tar"):
        if path.name.removesuffix("-merged.tar").removesuffix(".tar") != current:
            with contextlib.suppress(OSError):
                path.unlink()
