"""The data directory's files: what configs may name, uploaded by operators and deleted by admins.

Three folders, one per kind of file a config names:

- ``datasets/NAME.{jsonl,csv,parquet}`` — ``data.files.train`` / ``data.files.eval``;
- ``traces/NAME.{csv,json}`` — ``network.trace_file``;
- ``checkpoints/NAME/FILE`` — ``model.pretrained_path: checkpoints/NAME``: a ``save_pretrained``
  directory (config.json, safetensors weights, tokenizer files), uploaded file by file.

Names follow the workspace's rules (relative, no ``..``, no control characters) plus a plain
character set, so a name is the same on every host. An upload streams to a hidden temporary file
beside its target, counted against ``max_upload_bytes``, and is renamed into place only when
complete: a reader never sees half a file, and a refused upload leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

from backend.errors import Conflict, InvalidInput, NotFound
from backend.files.schemas import DataFileOut

FOLDERS = {"datasets": "dataset", "traces": "trace", "checkpoints": "checkpoint"}
SUFFIXES = {"datasets": (".jsonl", ".csv", ".parquet"), "traces": (".csv", ".json")}
CHECKPOINT_FILES = re.compile(
    r"(config|generation_config|tokenizer|tokenizer_config|special_tokens_map|vocab|added_tokens)\.json"
    r"|model(-\d{5}-of-\d{5})?\.safetensors|model\.safetensors\.index\.json|merges\.txt|vocab\.txt"
    r"|tokenizer\.model|spiece\.model"
)
_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
FIELD = "path"


class FileTooLarge(InvalidInput):
    status_code, code = 413, "payload_too_large"


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


def list_files(data_dir: Path) -> list[DataFileOut]:
    """Every dataset, trace and checkpoint in the data directory, by name."""
    found: list[DataFileOut] = []
    for folder, kind in FOLDERS.items():
        root = data_dir / folder
        if not root.is_dir():
            continue
        for entry in sorted(root.iterdir()):
            if entry.name.startswith(".") or entry.is_symlink():
                continue
            name = f"{folder}/{entry.name}"
            if kind == "checkpoint" and entry.is_dir():
                files = sorted(p.name for p in entry.iterdir() if p.is_file() and not p.name.startswith("."))
                size = sum((entry / f).stat().st_size for f in files)
                modified = max([entry.stat().st_mtime, *((entry / f).stat().st_mtime for f in files)])
                found.append(
                    DataFileOut(
                        name=name,
                        kind="checkpoint",
                        size_bytes=size,
                        modified_at=_utc(modified),
                        files=files,
                        complete="config.json" in files,
                    )
                )
            elif kind != "checkpoint" and entry.is_file() and entry.name.endswith(SUFFIXES[folder]):
                info = entry.stat()
                found.append(
                    DataFileOut(
                        name=name, kind=kind, size_bytes=info.st_size, modified_at=_utc(info.st_mtime)
                    )
                )
    return found


async def store(
    data_dir: Path, name: str, chunks: AsyncIterator[bytes], max_bytes: int, overwrite: bool
) -> DataFileOut:
    """Write an upload to ``name`` (see the module docstring); 409 if it exists and not ``overwrite``."""
    folder, parts = checked_name(name)
    target = data_dir.joinpath(*parts)
    if target.exists() and not overwrite:
        raise Conflict(f"{name} exists; send overwrite=true to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.parent / f".upload-{uuid.uuid4().hex}"
    size = 0
    try:
        with temporary.open("wb") as out:
            async for chunk in chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise FileTooLarge(
                        f"the upload is larger than {max_bytes:,} bytes (COLLAPIPE_MAX_UPLOAD_BYTES)",
                        [{"field": "body", "value": None, "message": "too large"}],
                    )
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    listed = [f for f in list_files(data_dir) if f.name == "/".join(parts[:2])]
    return (
        listed[0]
        if listed
        else DataFileOut(
            name=name,
            kind=FOLDERS[folder],
            size_bytes=size,
            modified_at=_utc(target.stat().st_mtime),
        )
    )


def delete(data_dir: Path, name: str) -> None:
    """Delete a dataset, a trace or a whole checkpoint (``checkpoints/NAME``)."""
    parts = name.split("/")
    if len(parts) != 2 or parts[0] not in FOLDERS or not _PART.fullmatch(parts[1]):
        raise InvalidInput(
            "give a listed name: datasets/NAME, traces/NAME or checkpoints/NAME",
            [{"field": FIELD, "value": name[:60], "message": "not a listed name"}],
        )
    target = data_dir / parts[0] / parts[1]
    if target.is_symlink() or not target.exists():
        raise NotFound(f"no file named {name!r} in the data directory")
    if target.is_dir():
        shutil.rmtree(target)
    else:
        target.unlink()


def _utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=UTC)
