"""The data directory's files: what configs may name, uploaded by operators and deleted by admins.

Three folders, one per kind of file a config names:

- ``datasets/NAME.{jsonl,csv,parquet}`` — ``data.files.train`` / ``data.files.eval``;
- ``traces/NAME.{csv,json}`` — ``network.trace_file``;
- ``checkpoints/NAME/FILE`` — ``model.pretrained_path: checkpoints/NAME``: a ``save_pretrained``
  directory (config.json, safetensors weights, tokenizer files), uploaded file by file.

Names follow the workspace's rules (relative, no ``..``, no control characters) plus a plain
character set, so a name is the same on every host. An upload:

- never goes through a symbolic link: each folder below the data directory is opened without
  following links (a link a host admin placed there, e.g. ``checkpoints/bert -> /models/bert``,
  would otherwise let every operator write outside the data directory), and an existing target that
  is a link is not replaced;
- replaces a file only with ``overwrite=true``, only by its uploader or an admin (a checkpoint is one
  unit: no one adds files to another user's), and never while a queued or running run names it;
- stays within the quotas: each user's uploads (``max_user_data_bytes``), all uploads
  (``max_data_bytes``, ``max_data_files``), and the disk keeps ``min_free_disk_bytes`` free;
- streams to a hidden temporary file beside its target (created exclusively, never through a link),
  counted against those limits, renamed into place only when complete and recorded with its
  uploader: a reader never sees half a file, and a refused or abandoned upload leaves nothing.

Its cost does not depend on how many files the directory holds (it looks at its own target only).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import posixpath
import re
import shutil
import stat
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from anyio import to_thread
from sqlalchemy.orm import Session
from starlette.requests import ClientDisconnect

from backend.db.models import User
from backend.errors import Conflict, DomainError, Forbidden, InvalidInput, NotFound
from backend.files import repository as repo
from backend.files.schemas import DataFileOut
from backend.settings import Settings

log = logging.getLogger(__name__)

FOLDERS = {"datasets": "dataset", "traces": "trace", "checkpoints": "checkpoint"}
SUFFIXES = {"datasets": (".jsonl", ".csv", ".parquet"), "traces": (".csv", ".json")}
CHECKPOINT_FILES = re.compile(
    r"(config|generation_config|tokenizer|tokenizer_config|special_tokens_map|vocab|added_tokens)\.json"
    r"|model(-\d{5}-of-\d{5})?\.safetensors|model\.safetensors\.index\.json|merges\.txt|vocab\.txt"
    r"|tokenizer\.model|spiece\.model"
)
_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
FIELD = "path"
# the config fields that name a file or a checkpoint of the data directory
NAMED_BY = (
    ("data", "files", "train"),
    ("data", "files", "eval"),
    ("network", "trace_file"),
    ("model", "pretrained_path"),
)


class FileTooLarge(InvalidInput):
    status_code, code = 413, "payload_too_large"


class FileExists(Conflict):
    """The target exists and the upload did not ask to replace it (``overwrite=true`` would)."""

    code = "file_exists"


class ClientGone(DomainError):
    """The client closed the connection mid-upload: nothing was stored, and no one reads the answer."""

    status_code, code = 400, "client_disconnected"


@dataclass(frozen=True)
class UploadLimits:
    max_upload_bytes: int
    max_user_bytes: int
    max_total_bytes: int
    max_files: int
    min_free_bytes: int

    @staticmethod
    def of(settings: Settings) -> UploadLimits:
        return UploadLimits(
            settings.max_upload_bytes,
            settings.max_user_data_bytes,
            settings.max_data_bytes,
            settings.max_data_files,
            settings.min_free_disk_bytes,
        )


def free_bytes(path: Path) -> int:
    """Free bytes on the disk holding ``path``."""
    return shutil.disk_usage(path).free


def checked_name(name: str) -> tuple[str, list[str]]:
    """(folder, parts) of an upload target; InvalidInput naming the rule it breaks."""
    parts = name.split("/")
    problem = None
    if not all(_PART.fullmatch(p) for p in parts):
        problem = "each part of the path is 1-100 letters, digits, '.', '_' or '-', not starting with '.'"
    elif parts[0] not in FOLDERS:
        problem = f"starts with one of {', '.join(f + '/' for f in FOLDERS)}"
    elif parts[0] == "checkpoints":
        if len(parts) != 3 or not CHECKPOINT_FILES.fullmatch(parts[2]):
            problem = (
                "is checkpoints/NAME/FILE, FILE one of what save_pretrained writes (config.json, "
                "model.safetensors, tokenizer.json, tokenizer_config.json, ...)"
            )
    elif len(parts) != 2 or not parts[1].endswith(SUFFIXES[parts[0]]):
        problem = f"is {parts[0]}/NAME with NAME ending in {' or '.join(SUFFIXES[parts[0]])}"
    if problem is not None:
        message = f"the file's path {problem}"
        raise InvalidInput(message, [{"field": FIELD, "value": name[:60], "message": message}])
    return parts[0], parts


# -- listing ---------------------------------------------------------------------------------------


def list_files(data_dir: Path, uploaders: dict[str, str | None]) -> list[DataFileOut]:
    """Every dataset, trace and checkpoint in the data directory, by name, with its uploader (from
    ``uploaders``: file name -> username). Links are left out, and so is a file deleted meanwhile."""
    found: list[DataFileOut] = []
    for folder, kind in FOLDERS.items():
        root = data_dir / folder
        if root.is_symlink() or not root.is_dir():
            continue
        for entry in sorted(root.iterdir()):
            with contextlib.suppress(FileNotFoundError):  # deleted between the listing and its stat
                if entry.name.startswith(".") or entry.is_symlink():
                    continue
                if kind == "checkpoint" and entry.is_dir():
                    found.append(_checkpoint(f"{folder}/{entry.name}", entry, uploaders))
                elif kind != "checkpoint" and entry.is_file() and entry.name.endswith(SUFFIXES[folder]):
                    name = f"{folder}/{entry.name}"
                    info = entry.stat()
                    found.append(
                        DataFileOut(
                            name=name,
                            kind=kind,
                            size_bytes=info.st_size,
                            modified_at=_utc(info.st_mtime),
                            uploaded_by=uploaders.get(name),
                        )
                    )
    return found


def _checkpoint(name: str, folder: Path, uploaders: dict[str, str | None]) -> DataFileOut:
    stats = {}
    for path in folder.iterdir():
        if path.name.startswith(".") or path.is_symlink():
            continue
        with contextlib.suppress(FileNotFoundError):
            info = path.stat()
            if stat.S_ISREG(info.st_mode):
                stats[path.name] = info
    files = sorted(stats)
    by = [uploaders[f"{name}/{f}"] for f in files if uploaders.get(f"{name}/{f}")]
    return DataFileOut(
        name=name,
        kind="checkpoint",
        size_bytes=sum(s.st_size for s in stats.values()),
        modified_at=_utc(max([folder.stat().st_mtime, *(s.st_mtime for s in stats.values())])),
        files=files,
        complete="config.json" in files,
        uploaded_by=by[0] if by else None,
    )


# -- upload ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
    folder: str  # datasets | traces | checkpoints
    dirs: list[str]  # the folders below the data directory, e.g. ["checkpoints", "bert"]
    file: str  # the file's name in its folder
    name: str  # datasets/x.csv, checkpoints/bert/config.json
    unit: str  # what is listed and named by configs: datasets/x.csv, checkpoints/bert

    @staticmethod
    def of(name: str) -> _Target:
        folder, parts = checked_name(name)
        unit = "/".join(parts[:2])
        return _Target(folder, parts[:-1], parts[-1], name, unit)


@dataclass(frozen=True)
class _Allowance:
    max_bytes: int  # the most this upload may hold
    refusal: str  # what the smallest limit says when it is passed


def _allowance(
    session: Session,
    data_dir: Path,
    target: _Target,
    user: User,
    overwrite: bool,
    limits: UploadLimits,
    existing: dict[str, Any],
) -> _Allowance:
    """Check the rules for writing ``target`` as ``user`` (see the module docstring); what it may hold."""
    rows = {row.name: row for row in repo.uploads_of(session, [target.name], _folder_unit(target))}
    if target.file in existing and not overwrite:
        raise FileExists(f"{target.name} exists; send overwrite=true to replace it")
    if user.role != "admin":
        changed = [f"{target.unit}/{f}" for f in existing] if _folder_unit(target) else [target.name]
        for name in sorted(changed) if existing else []:
            row = rows.get(name)
            if row is None or row.uploader_id != user.id:
                by = "was placed on the server, not uploaded" if row is None else _uploaded_by(session, row)
                raise Forbidden(
                    f"{target.unit} {by}; only its uploader or an admin may change it: upload under "
                    "another name"
                )
    if existing:
        _refuse_if_in_use(session, target)
    replaced = rows.get(target.name)
    user_bytes, _ = repo.usage(session, user.id)
    total_bytes, total_files = repo.usage(session)
    if replaced is not None:
        total_bytes -= replaced.size_bytes
        user_bytes -= replaced.size_bytes if replaced.uploader_id == user.id else 0
    elif total_files + 1 > limits.max_files:
        raise Conflict(
            f"the data directory holds {total_files} uploaded files, the most this server allows "
            "(COLLAPIPE_MAX_DATA_FILES): ask an admin to delete some"
        )
    free = free_bytes(data_dir) - limits.min_free_bytes
    allowances = [
        (
            limits.max_upload_bytes,
            f"the upload is larger than {limits.max_upload_bytes:,} bytes (COLLAPIPE_MAX_UPLOAD_BYTES)",
        ),
        (
            limits.max_user_bytes - user_bytes,
            f"your uploads would hold more than {limits.max_user_bytes:,} bytes "
            f"(COLLAPIPE_MAX_USER_DATA_BYTES; they hold {user_bytes:,}): delete or replace some of yours",
        ),
        (
            limits.max_total_bytes - total_bytes,
            f"the uploads would hold more than {limits.max_total_bytes:,} bytes (COLLAPIPE_MAX_DATA_BYTES; "
            f"they hold {total_bytes:,}): ask an admin to delete files",
        ),
        (
            free,
            f"the data directory's disk would keep less than {limits.min_free_bytes:,} bytes free "
            "(COLLAPIPE_MIN_FREE_DISK_BYTES): ask an admin to free space",
        ),
    ]
    max_bytes, refusal = min(allowances, key=lambda a: a[0])
    return _Allowance(max(0, max_bytes), refusal)


def _folder_unit(target: _Target) -> str | None:
    return target.unit if target.folder == "checkpoints" else None


def _uploaded_by(session: Session, row: Any) -> str:
    owner = session.get(User, row.uploader_id) if row.uploader_id is not None else None
    return f"was uploaded by {owner.username}" if owner is not None else "was uploaded by a deleted user"


def _refuse_if_in_use(session: Session, target: _Target) -> None:
    users = sorted(
        run_id
        for run_id, configs in repo.unfinished_run_configs(session)
        if any(target.unit in _named_files(config) for config in configs)
    )
    if users:
        runs = ", ".join(f"run {i}" for i in users[:10]) + (" ..." if len(users) > 10 else "")
        raise Conflict(
            f"{target.unit} is named by queued or running runs ({runs}); it cannot change under them: "
            "upload under another name, or wait for them to finish"
        )


def _named_files(config: dict[str, Any]) -> set[str]:
    """The data directory's names a config reads (files, and checkpoints by their folder)."""
    names = set()
    for path in NAMED_BY:
        value: Any = config
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str) and value:
            names.add(posixpath.normpath(value))
    return names


def _refuse_too_large(allowance: _Allowance) -> FileTooLarge:
    return FileTooLarge(allowance.refusal, [{"field": "body", "value": None, "message": "too large"}])


async def store(
    session_factory: Callable[[], Session],
    data_dir: Path,
    name: str,
    chunks: AsyncIterator[bytes],
    user: User,
    overwrite: bool,
    limits: UploadLimits,
    declared_bytes: int | None = None,
) -> DataFileOut:
    """Write an upload to ``name`` (see the module docstring); 409 if it exists and not ``overwrite``."""
    target = _Target.of(name)
    data_dir.mkdir(parents=True, exist_ok=True)
    created: list[Path] = []
    try:
        with _folder(data_dir, target.dirs, create=True, created=created) as folder_fd:
            upload = _Upload(session_factory, data_dir, target, user, overwrite, limits, folder_fd)
            allowance = await to_thread.run_sync(upload.check, None)
            if declared_bytes is not None and declared_bytes > allowance.max_bytes:
                raise _refuse_too_large(allowance)  # refused unread
            temporary = f".upload-{uuid.uuid4().hex}"
            try:
                size = await _receive(chunks, folder_fd, temporary, allowance, name)
                await to_thread.run_sync(upload.commit, temporary, size)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temporary, dir_fd=folder_fd)
            return _stored(folder_fd, target, user)
    except BaseException:
        for folder in reversed(created):  # folders made for a refused upload go again (if still empty)
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


@dataclass(frozen=True)
class _Upload:
    session_factory: Callable[[], Session]
    data_dir: Path
    target: _Target
    user: User
    overwrite: bool
    limits: UploadLimits
    folder_fd: int  # the target's folder, opened without following links

    def check(self, size: int | None) -> _Allowance:
        """What the upload may hold, once the rules allow it (a short session of its own)."""
        with self.session_factory() as session:
            return self._allowed(session, size)

    def commit(self, temporary: str, size: int) -> None:
        """Check the rules again (other requests ran meanwhile), record the upload, move it into place."""
        with self.session_factory() as session:
            self._allowed(session, size)
            repo.record(session, self.target.name, self.user.id, size)
            os.replace(temporary, self.target.file, src_dir_fd=self.folder_fd, dst_dir_fd=self.folder_fd)
            session.commit()

    def _allowed(self, session: Session, size: int | None) -> _Allowance:
        existing = _existing(self.folder_fd, self.target)
        allowance = _allowance(
            session, self.data_dir, self.target, self.user, self.overwrite, self.limits, existing
        )
        if size is not None and size > allowance.max_bytes:
            raise _refuse_too_large(allowance)
        return allowance


async def _receive(
    chunks: AsyncIterator[bytes], folder_fd: int, temporary: str, allowance: _Allowance, name: str
) -> int:
    """Stream the body into a new file ``temporary`` of the folder (never through a link); its size."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    size = 0
    with os.fdopen(os.open(temporary, flags, 0o644, dir_fd=folder_fd), "wb") as out:
        try:
            async for chunk in chunks:
                size += len(chunk)
                if size > allowance.max_bytes:
                    raise _refuse_too_large(allowance)
                out.write(chunk)
        except ClientDisconnect:
            log.info("upload of %s ended by the client after %d bytes; nothing stored", name, size)
            raise ClientGone("the client closed the connection before the upload ended") from None
        out.flush()
        os.fsync(out.fileno())
    return size


def _existing(folder_fd: int, target: _Target) -> dict[str, Any]:
    """What the upload would change: {file name: stat} of the target (a dataset, a trace) or of every
    file of its checkpoint; 409 if the target is a link or a folder."""
    try:
        info = os.stat(target.file, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_ISLNK(info.st_mode):
        raise _link_refused(target.name)
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise Conflict(f"{target.name} is a folder on the server, not a file; upload under another name")
    if target.folder != "checkpoints":
        return {} if info is None else {target.file: info}
    return dict(_regular_files(folder_fd))


def _regular_files(folder_fd: int) -> Iterator[tuple[str, os.stat_result]]:
    for entry in os.listdir(folder_fd):
        if entry.startswith("."):
            continue
        with contextlib.suppress(FileNotFoundError):
            info = os.stat(entry, dir_fd=folder_fd, follow_symlinks=False)
            if stat.S_ISREG(info.st_mode):
                yield entry, info


def _stored(folder_fd: int, target: _Target, user: User) -> DataFileOut:
    """The listed entry of what was just stored (its own folder only)."""
    kind = FOLDERS[target.folder]
    if target.folder != "checkpoints":
        info = os.stat(target.file, dir_fd=folder_fd, follow_symlinks=False)
        return DataFileOut(
            name=target.unit,
            kind=kind,
            size_bytes=info.st_size,
            modified_at=_utc(info.st_mtime),
            uploaded_by=user.username,
        )
    files = dict(_regular_files(folder_fd))
    return DataFileOut(
        name=target.unit,
        kind=kind,
        size_bytes=sum(s.st_size for s in files.values()),
        modified_at=_utc(max(s.st_mtime for s in files.values())),
        files=sorted(files),
        complete="config.json" in files,
        uploaded_by=user.username,
    )


@contextlib.contextmanager
def _folder(
    data_dir: Path, dirs: Sequence[str], create: bool, created: list[Path] | None = None
) -> Iterator[int]:
    """A file descriptor of ``data_dir/dirs...``, each folder opened without following a link (409 for
    a link or a file on the way; FileNotFoundError when missing and not ``create``). The folders it
    makes are appended to ``created``."""
    fd = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(dirs):
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                    if created is not None:
                        created.append(data_dir.joinpath(*dirs[: i + 1]))
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as err:
                if err.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                where = "/".join(dirs[: i + 1])
                if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise _link_refused(where) from None
                raise Conflict(f"{where} is a file on the server, not a folder; ask an admin") from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _link_refused(name: str) -> Conflict:
    return Conflict(
        f"{name} is a symbolic link on the server; uploads never write through links (it could lead "
        "outside the data directory): ask an admin to replace it with a folder or a file"
    )


# -- delete ----------------------------------------------------------------------------------------


def delete(session: Session, data_dir: Path, name: str) -> None:
    """Delete a dataset, a trace or a whole checkpoint (``checkpoints/NAME``), and its upload records."""
    parts = name.split("/")
    if len(parts) != 2 or parts[0] not in FOLDERS or not _PART.fullmatch(parts[1]):
        raise InvalidInput(
            "give a listed name: datasets/NAME, traces/NAME or checkpoints/NAME",
            [{"field": FIELD, "value": name[:60], "message": "not a listed name"}],
        )
    missing = NotFound(f"no file named {name!r} in the data directory")
    try:
        with _folder(data_dir, parts[:1], create=False) as folder_fd:
            try:
                info = os.stat(parts[1], dir_fd=folder_fd, follow_symlinks=False)
            except FileNotFoundError:
                raise missing from None
            if stat.S_ISLNK(info.st_mode):
                raise missing
            repo.forget(session, name)
            if stat.S_ISDIR(info.st_mode):
                shutil.rmtree(parts[1], dir_fd=folder_fd)
            else:
                os.unlink(parts[1], dir_fd=folder_fd)
    except FileNotFoundError:
        raise missing from None


def _utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=UTC)
