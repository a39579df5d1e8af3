"""SQL of the data directory's uploads: who uploaded which file, their sizes, and the configs of the
runs that may still read files."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import ColumnElement, delete, func, or_, select
from sqlalchemy.orm import Session

from backend.db.models import DataFile, Run, User


def uploads_of(session: Session, names: Iterable[str], folder: str | None) -> list[DataFile]:
    """The rows of these files, and of every file under ``folder/`` if given (a checkpoint)."""
    condition: ColumnElement[bool] = DataFile.name.in_(list(names))
    if folder is not None:
        condition = or_(condition, DataFile.name.startswith(f"{folder}/", autoescape=True))
    return list(session.scalars(select(DataFile).where(condition)))


def usage(session: Session, uploader_id: int | None = None) -> tuple[int, int]:
    """(bytes, files) of every upload, or of one uploader's."""
    query = select(func.coalesce(func.sum(DataFile.size_bytes), 0), func.count(DataFile.id))
    if uploader_id is not None:
        query = query.where(DataFile.uploader_id == uploader_id)
    size, count = session.execute(query).one()
    return int(size), int(count)


def record(session: Session, name: str, uploader_id: int, size_bytes: int) -> None:
    """Record (or replace the record of) an upload."""
    row = session.scalar(select(DataFile).where(DataFile.name == name))
    if row is None:
        session.add(DataFile(name=name, uploader_id=uploader_id, size_bytes=size_bytes))
    else:
        row.uploader_id, row.size_bytes = uploader_id, size_bytes
    session.flush()


def forget(session: Session, name: str) -> None:
    """Forget the upload ``name`` and, for a checkpoint, every file under it."""
    session.execute(
        delete(DataFile).where(
            or_(DataFile.name == name, DataFile.name.startswith(f"{name}/", autoescape=True))
        )
    )


def uploaders(session: Session) -> dict[str, str | None]:
    """Each recorded file's uploader's username (None: the user was deleted)."""
    rows = session.execute(
        select(DataFile.name, User.username).outerjoin(User, User.id == DataFile.uploader_id)
    )
    return {name: username for name, username in rows}


def unfinished_run_configs(session: Session) -> list[tuple[int, list[dict[str, Any]]]]:
    """(id, configs) of every queued or running run, the runs that will still read files: its config
    and, for a fork, the configs it replays."""
    query = select(Run.id, Run.config, Run.replay_configs).where(Run.status.in_(("queued", "running")))
    return [
        (run_id, [config, *(entry["config"] for entry in replay or [])])
        for run_id, config, replay in session.execute(query)
    ]
