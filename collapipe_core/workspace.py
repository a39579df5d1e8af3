"""What a config may reach in the process that runs it: files, policies and memory.

A config names files (``network.trace_file``) and a policy (``scheduler.policy``). Who may name
what depends on where the config runs, so every part that reads a config's files or creates its
policy (validation, the runner, the executors) asks a :class:`Workspace`:

- :meth:`Workspace.local` — the CLI and the Python API, the user's own process: a file is a plain
  path (relative to the current directory), a policy may be an import path, no limits.
- :meth:`Workspace.service` — the API and its workers: a file is a *name inside the data
  directory* (``traces/phones.csv``). Absolute paths, ``..``, URLs and other schemes are refused
  without touching the file system; a name whose file is missing, is not a regular file (a
  device, a directory, a FIFO) or resolves outside the directory (a symlink leaving it) gets one
  and the same answer, so nobody learns which files exist elsewhere. A file's size is checked
  before it is read. Policies must be registered (:class:`~collapipe_core.scheduler.PolicyRegistry`);
  a run's modeled memory must fit what a worker may use.

Refusals are :class:`FileRefused` errors (a ``ValueError``) that name the config field.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from collapipe_core.quote import short

if TYPE_CHECKING:  # the scheduler imports the round state, which reads files through a workspace
    from collapipe_core.scheduler.base import PolicyRegistry

MAX_NAME_CHARS = 255
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")


class FileRefused(ValueError):
    """A config's file cannot be used; ``field`` is the config field that names it."""

    def __init__(self, field: str, value: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.value = value
        self.message = message


def _local_registry() -> PolicyRegistry:
    from collapipe_core.scheduler.base import PolicyRegistry

    return PolicyRegistry.local()


@dataclass(frozen=True)
class Workspace:
    data_dir: Path | None = None  # None: plain paths (the local CLI)
    policies: PolicyRegistry = field(default_factory=_local_registry)
    max_file_bytes: int | None = None  # a file a config names may not be larger
    memory_limit_bytes: int | None = None  # what the process running a run may use (modeled)

    @staticmethod
    def local() -> Workspace:
        return Workspace()

    @staticmethod
    def service(
        data_dir: Path,
        policies: PolicyRegistry,
        *,
        max_file_bytes: int,
        memory_limit_bytes: int | None,
    ) -> Workspace:
        return Workspace(Path(data_dir), policies, max_file_bytes, memory_limit_bytes)

    def path(self, field_name: str, name: str) -> Path:
        """The regular file ``name`` refers to; FileRefused (naming ``field_name``) otherwise."""
        if self.data_dir is None:
            path = Path(name)
            try:
                info = path.stat()
            except OSError as err:
                raise FileRefused(field_name, name, f"cannot read {short(name)}: {err.strerror}") from None
            if not stat.S_ISREG(info.st_mode):
                raise FileRefused(field_name, name, f"{short(name)} is not a regular file")
            return path
        _check_name(field_name, name)
        root = self.data_dir.resolve()
        resolved = (root / name).resolve()
        missing = FileRefused(field_name, name, f"no file named {short(name)} in the data directory")
        if not resolved.is_relative_to(root):
            raise missing
        try:
            info = resolved.stat()
        except OSError:
            raise missing from None
        if not stat.S_ISREG(info.st_mode):
            raise missing
        return resolved

    def directory(self, field_name: str, name: str) -> Path:
        """The directory ``name`` refers to (a model checkpoint); FileRefused otherwise, with one answer
        for missing, not-a-directory and outside-the-data-directory, as for files."""
        if self.data_dir is None:
            path = Path(name)
            if not path.is_dir():
                why = "does not exist" if not path.exists() else "is not a directory"
                raise FileRefused(field_name, name, f"{short(name)} {why}")
            return path
        _check_name(field_name, name)
        root = self.data_dir.resolve()
        resolved = (root / name).resolve()
        if not resolved.is_relative_to(root) or not resolved.is_dir():
            raise FileRefused(field_name, name, f"no directory named {short(name)} in the data directory")
        return resolved

    def read_bytes(
        self, field_name: str, name: str, max_bytes: int | None = None, *, kind: str | None = None
    ) -> bytes:
        """The file's content, refused (before reading) when it exceeds ``max_file_bytes`` (or the
        caller's tighter ``max_bytes``, a limit for files of ``kind``: "a tokenizer.json")."""
        path = self.path(field_name, name)
        limits = [x for x in (self.max_file_bytes, max_bytes) if x is not None]
        limit = min(limits) if limits else None
        try:
            return read_regular_file(path, limit)
        except FileTooBig as err:
            own = kind is not None and limit == max_bytes
            message = _too_big(name, err.size, err.limit, kind if own else None)
            raise FileRefused(field_name, name, message) from None
        except OSError:
            raise FileRefused(
                field_name, name, f"no file named {short(name)} in the data directory"
            ) from None

    def read_text(self, field_name: str, name: str, max_bytes: int | None = None) -> str:
        data = self.read_bytes(field_name, name, max_bytes)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise FileRefused(
                field_name, name, f"{short(name)} is not UTF-8 text (byte {err.start}); save it as UTF-8"
            ) from None


class FileTooBig(Exception):
    """A file larger than what its reader takes: ``size`` bytes (at least), ``limit`` allowed."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size} bytes, more than {limit}")
        self.size = size
        self.limit = limit


def read_regular_file(path: Path, limit: int | None, *, follow_symlinks: bool = False) -> bytes:
    """The content of the regular file ``path``, of at most ``limit`` bytes.

    It is opened without blocking (a FIFO never hangs the reader) and, unless ``follow_symlinks``,
    refused when its last component is a symlink; what was opened is judged by ``fstat``: OSError
    when it is not a regular file (a device, a FIFO, a directory) or cannot be opened, FileTooBig
    before reading when it is larger than ``limit`` (or when it grew past it while being read).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path.name} is not a regular file")
        if limit is not None and info.st_size > limit:
            raise FileTooBig(info.st_size, limit)
        data = handle.read(info.st_size + 1)  # read(n) allocates n bytes first: never the whole limit
        if len(data) > info.st_size:  # it grows while being read
            data += handle.read() if limit is None else handle.read(limit + 1 - len(data))
    if limit is not None and len(data) > limit:
        raise FileTooBig(len(data), limit)
    return data


def _check_name(field_name: str, name: str) -> None:
    """Refuse, from the name alone, anything but a relative path inside the directory."""
    problem = None
    parts = PurePosixPath(name).parts
    if not name or len(name) > MAX_NAME_CHARS:
        problem = f"must be 1 to {MAX_NAME_CHARS} characters"
    elif any(ord(c) < 32 or c == "\x7f" for c in name) or "\\" in name:
        problem = "must not contain control characters or backslashes"
    elif name.startswith(("/", "~")) or _SCHEME.match(name):
        problem = "must be a name inside the data directory, not an absolute path, a URL or a drive"
    elif ".." in parts:
        problem = "must not contain '..'"
    if problem is not None:
        raise FileRefused(
            field_name,
            name,
            f"{problem}: give a file's name relative to the data directory, e.g. 'traces/phones.csv'",
        )


def _too_big(name: str, size: int, limit: int, kind: str | None = None) -> str:
    if kind is not None:
        return f"{short(name)} is {size / 2**20:.1f} MiB; {kind} may be at most {limit / 2**20:.1f} MiB"
    return (
        f"{short(name)} is {size / 2**20:.1f} MiB; files a config names may be at most "
        f"{limit / 2**20:.1f} MiB (COLLAPIPE_MAX_FILE_BYTES; a trace at most 8 MiB)"
    )
