"""The studies API's rules: a study is checked whole before anything is stored, then created with
all its runs in one transaction; cancel and resume act on every run of it. Every transition is
``backend.runtime.lifecycle``'s; the executor gets the runs once the request commits."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from backend.config_input import validated_config
from backend.db.models import Run, Study, User
from backend.db.transaction import after_commit
from backend.errors import Conflict, InvalidConfig, InvalidInput, NotFound
from backend.experiments import service as experiments
from backend.runs import active_repository as active_repo
from backend.runs.service import check_owner, check_room, new_run
from backend.runtime import lifecycle
from backend.runtime.dispatch import RunDispatcher
from backend.runtime.wake import Wake
from backend.settings import Settings
from backend.studies import grid
from backend.studies import repository as repo
from backend.studies.grid import SEED, Axis, Cell, PlannedRun
from backend.studies.schemas import StudyBase, StudyCreate
from backend.text_input import nul_paths
from collapipe_core.config import ExperimentConfig
from collapipe_core.workspace import Workspace


@dataclass(frozen=True)
class StudyCaps:
    max_study_runs: int  # runs one study may create
    max_active_runs: int  # queued or running runs one user may have
    max_active_studies: int  # unfinished studies one user may have

    @staticmethod
    def of(settings: Settings) -> StudyCaps:
        return StudyCaps(
            settings.max_study_runs, settings.max_active_runs_per_user, settings.max_active_studies_per_user
        )


MAX_DETAILS = 100  # a refused study lists at most this many problems (the message gives the count)
MAX_EXPANDED_BYTES = 64 * 2**20  # the runs' configs together, as JSON: a bound on what one request builds


def get(session: Session, study_id: int) -> Study:
    study = repo.get(session, study_id)
    if study is None:
        raise NotFound(f"no study with id {study_id}")
    return study


def ensure_exists(session: Session, study_id: int) -> None:
    if not repo.exists(session, study_id):
        raise NotFound(f"no study with id {study_id}")


def run_ids(session: Session, study_id: int) -> list[int]:
    """The study's runs (NotFound: no such study)."""
    ensure_exists(session, study_id)
    return repo.run_ids(session, study_id)


def page(session: Session, search: str | None, limit: int, offset: int) -> tuple[list[Study], int]:
    return repo.page(session, search, limit, offset)


@dataclass(frozen=True)
class _Base:
    name: str
    config: dict[str, Any]
    experiment_id: int | None


def _problem(field: str, value: Any, message: str) -> dict[str, Any]:
    return {"field": field, "value": value, "message": message}


def _refuse(message: str, details: list[dict[str, Any]]) -> InvalidInput:
    shown = details[:MAX_DETAILS]
    more = f" (the first {len(shown)} of {len(details)} listed)" if len(shown) < len(details) else ""
    return InvalidInput(f"{message}; nothing was created{more}", shown)


def _check_axes(body: StudyCreate, max_runs: int) -> list[Axis]:
    axes = [Axis(a.field, tuple(a.values)) for a in body.axes]
    problems = [
        _problem(f"axes.{i}.field", axis.field, why)
        for i, axis in enumerate(axes)
        if (why := grid.field_problem(axis.field)) is not None
    ]
    for a, b in grid.overlapping([axis.field for axis in axes]):
        problems.append(_problem("axes", [a, b], f"axes {a!r} and {b!r} set the same value; keep one"))
    if body.mode == "zip" and len({len(axis.values) for axis in axes}) > 1:
        lengths = {axis.field: len(axis.values) for axis in axes}
        problems.append(
            _problem("axes", lengths, "mode 'zip' takes row i of every axis: give them equal lengths")
        )
    if problems:
        raise _refuse("the study's axes are invalid", problems)
    runs = grid.num_runs(len(body.bases), axes, body.mode)
    if runs > max_runs:
        raise _refuse(
            f"the study has {runs} runs, more than the {max_runs} this server allows",
            [
                _problem(
                    "axes",
                    runs,
                    f"at most {max_runs} runs (cells × seeds × bases; COLLAPIPE_MAX_STUDY_RUNS): "
                    "use fewer values or split the study",
                )
            ],
        )
    return axes


def _bases(session: Session, bases: list[StudyBase]) -> list[_Base]:
    resolved, problems = [], []
    for i, base in enumerate(bases):
        if base.experiment_id is not None:
            try:
                experiment = experiments.get(session, base.experiment_id)
            except NotFound:
                problems.append(
                    _problem(f"bases.{i}.experiment_id", base.experiment_id, "no such experiment")
                )
                continue
            name, config = base.name or experiment.name, dict(experiment.config)
        else:
            assert base.config is not None  # StudyBase guarantees one source
            config = base.config
            default = config.get("name")
            name = base.name or (default if isinstance(default, str) and default else f"base {i}")
        resolved.append(_Base(name[:100], config, base.experiment_id))
    names = [b.name for b in resolved]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(_problem("bases", name, f"two bases are named {name!r}; give each a unique name"))
    if problems:
        raise _refuse("the study's bases are invalid", problems)
    return resolved


def _check_baseline(baseline: dict[str, Any] | None, axes: list[Axis], bases: list[_Base]) -> None:
    if not baseline:
        return
    choices: dict[str, tuple[Any, ...]] = {a.field: a.values for a in axes if a.field != SEED}
    choices["base"] = tuple(b.name for b in bases)
    problems = []
    for field, value in baseline.items():
        if field not in choices:
            problems.append(
                _problem(
                    f"baseline.{field}", value, f"not an axis of the study; choose from {sorted(choices)}"
                )
            )
        elif not any(grid.same_value(value, v) for v in choices[field]):
            problems.append(_problem(f"baseline.{field}", value, f"not one of the values of {field!r}"))
    if problems:
        raise _refuse("the study's baseline is invalid", problems)


def _cell_problems(
    cell: Cell, planned: PlannedRun, fields: list[str], err: InvalidConfig
) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    found = []
    for detail in err.details:
        field = str(detail["field"]).removeprefix("config.")
        axis = grid.axis_of(field, fields)
        problem = {
            "field": field,
            "value": detail.get("value"),
            "message": detail["message"],
            "cell": cell.index,
            "base": cell.base,
            "values": cell.values,
            "axis": axis,
            "axis_value": planned.values.get(axis) if axis is not None else None,
            "seeds": [],
        }
        found.append(((cell.index, field, detail["message"]), problem))
    return found


def _check_size(bases: list[_Base], axes: list[Axis], plan: grid.Plan) -> None:
    """Refuse a study whose runs' configs would be too much text to build (large axis values)."""
    base_bytes = [len(json.dumps(b.config)) for b in bases]
    value_bytes = {id(v): len(json.dumps(v)) for a in axes for v in a.values}
    total = sum(base_bytes[r.base] + sum(value_bytes[id(v)] for v in r.values.values()) for r in plan.runs)
    if total > MAX_EXPANDED_BYTES:
        raise _refuse(
            "the study's runs would hold too much config",
            [
                _problem(
                    "axes",
                    total,
                    f"its {len(plan.runs)} configs come to {total} bytes of JSON, more than "
                    f"{MAX_EXPANDED_BYTES}: use smaller axis values or fewer runs",
                )
            ],
        )


def _run_configs(
    bases: list[_Base], axes: list[Axis], plan: grid.Plan, workspace: Workspace
) -> list[ExperimentConfig]:
    """Every run's config, checked; one 422 naming every bad cell (and its seeds) otherwise."""
    fields = [a.field for a in axes]
    configs: list[ExperimentConfig] = []
    checked: dict[str, ExperimentConfig | InvalidConfig] = {}
    problems: dict[tuple[Any, ...], dict[str, Any]] = {}
    for planned in plan.runs:
        data = grid.run_config(bases[planned.base].config, planned.values)
        key = json.dumps(data, sort_keys=True)
        if key not in checked:
            try:
                checked[key] = validated_config(data, workspace)
            except InvalidConfig as err:
                checked[key] = err
        outcome = checked[key]
        if isinstance(outcome, InvalidConfig):
            for problem_key, problem in _cell_problems(plan.cells[planned.cell], planned, fields, outcome):
                entry = problems.setdefault(problem_key, problem)
                if SEED in planned.values:
                    entry["seeds"].append(planned.values[SEED])
        else:
            configs.append(outcome)
    if problems:
        bad_cells = len({key[0] for key in problems})
        raise _refuse(
            f"{bad_cells} of the study's {len(plan.cells)} cells are invalid", list(problems.values())
        )
    return configs


def create(
    session: Session,
    owner: User,
    body: StudyCreate,
    wake: Wake,
    dispatcher: RunDispatcher,
    workspace: Workspace,
    caps: StudyCaps,
) -> Study:
    """Check the whole study (axes, bases, baseline, every run's config), then store it and its runs
    queued; the executor gets them once the request commits. Within the owner's caps of unfinished
    studies and of queued or running runs."""
    active = active_repo.active_studies(session, owner.id)
    if active >= caps.max_active_studies:
        raise Conflict(
            f"you have {active} studies with runs still queued or running, the most one user may have "
            "(COLLAPIPE_MAX_ACTIVE_STUDIES_PER_USER): wait for one to finish or cancel one"
        )
    bad = nul_paths(body.model_dump(mode="json"))
    if bad:
        raise _refuse(
            "the study contains NUL characters", [_problem(p, None, "must not contain NUL") for p in bad]
        )
    axes = _check_axes(body, caps.max_study_runs)
    bases = _bases(session, body.bases)
    _check_baseline(body.baseline, axes, bases)
    plan = grid.expand([b.name for b in bases], axes, body.mode)
    check_room(session, owner.id, len(plan.runs), caps.max_active_runs)
    _check_size(bases, axes, plan)
    configs = _run_configs(bases, axes, plan, workspace)
    study = Study(
        name=body.name,
        owner_id=owner.id,
        definition={
            "bases": [
                {
                    "name": b.name,
                    "experiment_id": b.experiment_id,
                    "config": None if b.experiment_id else b.config,
                }
                for b in bases
            ],
            "axes": [{"field": a.field, "values": list(a.values)} for a in axes],
            "mode": body.mode,
            "concurrency": body.concurrency,
            "baseline": body.baseline,
            **({"regime_map": body.regime_map.model_dump()} if body.regime_map else {}),
        },
        cells=[c.to_json() for c in plan.cells],
        concurrency=body.concurrency,
    )
    labels = grid.cell_labels(plan.cells)
    runs: list[Run] = []
    for planned, config in zip(plan.runs, configs, strict=True):
        name = f"{body.name} · {labels[planned.cell]} · seed {config.seed}"[:200]
        experiment_id = bases[planned.base].experiment_id
        runs.append(new_run(owner, config, name, experiment_id=experiment_id, study_cell=planned.cell))
    lifecycle.create_study(session, study, runs, wake)
    run_ids = [run.id for run in runs]
    after_commit(session, lambda: _enqueue(dispatcher, run_ids))
    return study


def _enqueue(dispatcher: RunDispatcher, run_ids: list[int]) -> None:
    for run_id in run_ids:
        dispatcher.enqueue(run_id)


def cancel(session: Session, actor: User, study_id: int, wake: Wake) -> int:
    """Every unfinished run: queued ones cancelled now, running ones stop after their round. Only the
    study's owner or an admin may cancel it."""
    study = get(session, study_id)
    check_owner(actor, study.owner_id, f"study {study_id}", "cancel")
    cancelled, asked = lifecycle.cancel_study(session, study_id, wake)
    return cancelled + asked


def resume(
    session: Session, actor: User, study_id: int, wake: Wake, dispatcher: RunDispatcher, max_active: int
) -> int:
    """Every failed or cancelled run back to the queue (each continues from its checkpoint). Only the
    study's owner or an admin may resume it, within the owner's cap of queued or running runs."""
    study = get(session, study_id)
    check_owner(actor, study.owner_id, f"study {study_id}", "resume")
    owner_id = study.owner_id if study.owner_id is not None else actor.id
    check_room(session, owner_id, active_repo.resumable_study_runs(session, study_id), max_active)
    run_ids = lifecycle.resume_study(session, study_id, wake)
    after_commit(session, lambda: _enqueue(dispatcher, run_ids))
    return len(run_ids)
