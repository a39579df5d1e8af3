"""SQL reads of studies, their runs and their runs' stored rows (writes of runs and studies are
backend.runtime.lifecycle's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select, case, func, select
from sqlalchemy.orm import Session

from backend.db.models import DeviceMetric, RoundMetric, Run, RunEvent, Study, User


def get(session: Session, study_id: int) -> Study | None:
    return session.get(Study, study_id)


def exists(session: Session, study_id: int) -> bool:
    return session.scalar(select(Study.id).where(Study.id == study_id)) is not None


def owner_names(session: Session, owner_ids: set[int]) -> dict[int, str]:
    if not owner_ids:
        return {}
    return {
        int(i): str(n)
        for i, n in session.execute(select(User.id, User.username).where(User.id.in_(owner_ids)))
    }


def page(session: Session, search: str | None, limit: int, offset: int) -> tuple[list[Study], int]:
    query = select(Study)
    if search:
        query = query.where(func.lower(Study.name).contains(search.lower(), autoescape=True))
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    items = session.scalars(query.order_by(Study.id.desc()).limit(limit).offset(offset)).all()
    return list(items), int(total)


def _study_runs(study_id: int) -> Select[Any]:
    return select(Run.id).where(Run.study_id == study_id)


def run_ids(session: Session, study_id: int) -> list[int]:
    return list(session.scalars(_study_runs(study_id).order_by(Run.id)))


def status_counts(session: Session, study_ids: Sequence[int]) -> list[Any]:
    """(study_id, status, runs, rounds_done, total_rounds) per study and run status."""
    query = (
        select(
            Run.study_id,
            Run.status,
            func.count(),
            func.coalesce(func.sum(Run.rounds_done), 0),
            func.coalesce(func.sum(Run.total_rounds), 0),
        )
        .where(Run.study_id.in_(study_ids))
        .group_by(Run.study_id, Run.status)
    )
    return list(session.execute(query).all())


def runs(session: Session, study_id: int) -> list[Any]:
    """(id, study_cell, status, rounds_done, total_rounds, error, seed, training section, executor) of
    the study's runs, in id order (two small parts of each config, not the whole document)."""
    query = select(
        Run.id,
        Run.study_cell,
        Run.status,
        Run.rounds_done,
        Run.total_rounds,
        Run.error,
        Run.config["seed"],
        Run.config["training"],
        Run.executor,
    ).where(Run.study_id == study_id)
    return list(session.execute(query.order_by(Run.id)).all())


def rounds(session: Session, study_id: int) -> list[Any]:
    """(run_id, latency_s, eval_loss, num_microbatches, eval_metrics) of every stored round of the
    study's runs, in run and round order."""
    query = (
        select(
            RoundMetric.run_id,
            RoundMetric.latency_s,
            RoundMetric.eval_loss,
            RoundMetric.record["num_microbatches"],
            RoundMetric.record["eval_metrics"],
        )
        .where(RoundMetric.run_id.in_(_study_runs(study_id)))
        .order_by(RoundMetric.run_id, RoundMetric.round)
    )
    return list(session.connection().execute(query).all())


def device_totals_per_round(session: Session, study_id: int) -> list[Any]:
    """(run_id, Σ compute_s over the round's devices, devices, devices holding blocks) per stored round,
    in run and round order."""
    holding = func.count(case((DeviceMetric.num_blocks > 0, 1)))
    query = (
        select(DeviceMetric.run_id, func.sum(DeviceMetric.compute_s), func.count(), holding)
        .where(DeviceMetric.run_id.in_(_study_runs(study_id)))
        .group_by(DeviceMetric.run_id, DeviceMetric.round)
        .order_by(DeviceMetric.run_id, DeviceMetric.round)
    )
    return list(session.connection().execute(query).all())


def device_memory_and_backlog(session: Session, study_id: int) -> list[Any]:
    """(run_id, peak and mean memory_bytes of the devices holding blocks, mean queue, the largest
    memory_bytes / memory_capacity_bytes of a device holding blocks) per run."""
    held = case((DeviceMetric.num_blocks > 0, DeviceMetric.memory_bytes))
    over = case(
        (
            DeviceMetric.num_blocks > 0,
            DeviceMetric.memory_bytes / func.nullif(DeviceMetric.memory_capacity_bytes, 0.0),
        )
    )
    query = (
        select(
            DeviceMetric.run_id,
            func.max(held),
            func.avg(held),
            func.avg(DeviceMetric.queue),
            func.max(over),
        )
        .where(DeviceMetric.run_id.in_(_study_runs(study_id)))
        .group_by(DeviceMetric.run_id)
    )
    return list(session.connection().execute(query).all())


def device_energy_over_budget(session: Session, study_id: int) -> list[Any]:
    """(run_id, mean over rounds of energy_j / energy_budget_j) per run and device."""
    ratio = DeviceMetric.energy_j / func.nullif(DeviceMetric.energy_budget_j, 0.0)
    query = (
        select(DeviceMetric.run_id, func.avg(ratio))
        .where(DeviceMetric.run_id.in_(_study_runs(study_id)))
        .group_by(DeviceMetric.run_id, DeviceMetric.device_id)
    )
    return list(session.connection().execute(query).all())


def latest_event_id(session: Session, study_id: int) -> str:
    """The id of the latest live event of the study's runs ("0": none)."""
    latest = session.scalar(
        select(func.max(RunEvent.position)).where(RunEvent.run_id.in_(_study_runs(study_id)))
    )
    return str(latest) if latest is not None else "0"
