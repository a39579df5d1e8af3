"""Every run transition on SQLite and PostgreSQL: the state it writes, the live event it writes in
the same transaction, and the fencing of executor-side writes by the lease token."""

from __future__ import annotations

import ast
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from backend.db.engine import SessionLimits, make_engine, make_session_factory
from backend.db.models import DeviceMetric, RoundMetric, Run, RunEvent
from backend.live.channel import ROUND, STATUS, LiveEvent
from backend.runtime import lifecycle
from backend.runtime.lifecycle import Lease, LeaseLost, RunStore
from collapipe_core.records import RoundResult
from tests.backend.builders import event_summary, insert_run, tiny_config

Factory = sessionmaker[Session]
REPO = Path(__file__).resolve().parents[3]


class Wakes:
    def __init__(self) -> None:
        self.keys: list[object] = []

    def notify(self, key: object, events: Sequence[LiveEvent]) -> None:
        self.keys.append(key)


def _row(factory: Factory, run_id: int) -> Run:
    with factory() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run


def _round(index: int) -> RoundResult:
    """A real round result of the tiny config (the analytic executor's round ``index``)."""
    from collapipe_core.runner import Runner
    from collapipe_core.sinks import MemorySink
    from collapipe_core.validation import parse_config

    sink = MemorySink()
    Runner(parse_config(tiny_config()), sink).run(max_rounds=index + 1)
    return sink.results[index]


def _expire(factory: Factory, run_id: int) -> None:
    with factory() as session:
        session.execute(update(Run).where(Run.id == run_id).values(lease_expires_at=Run.created_at))
        session.commit()


def test_claim_is_exclusive_and_reports_running(session_factory: Factory) -> None:
    run_id = insert_run(session_factory)
    wakes = Wakes()
    store = RunStore(session_factory, wakes)
    claimed = lifecycle.claim(store, run_id, "a", 30.0)
    assert claimed is not None
    lease, run = claimed
    assert (lease.token, run.attempt, run.total_rounds) == ("a", 1, 5)
    assert lifecycle.claim(store, run_id, "b", 30.0) is None  # a live lease is not taken over
    assert event_summary(session_factory, run_id) == [(STATUS, "running")] and wakes.keys == ["running"]
    row = _row(session_factory, run_id)
    assert (row.status, row.lease_owner) == ("running", "a") and row.started_at is not None


def test_an_expired_lease_is_taken_over_and_the_old_token_writes_nothing(session_factory: Factory) -> None:
    run_id = insert_run(session_factory)
    store = RunStore(session_factory)
    old = lifecycle.claim(store, run_id, "a", 30.0)
    assert old is not None
    _expire(session_factory, run_id)
    new = lifecycle.claim(store, run_id, "b", 30.0)
    assert new is not None and new[1].attempt == 2
    stale = old[0]
    assert not lifecycle.renew(store, stale)
    with pytest.raises(LeaseLost):
        lifecycle.record_round(store, stale, _round(0))
    assert not lifecycle.finish(store, stale, "succeeded", None)
    assert not lifecycle.release(store, stale)
    assert event_summary(session_factory, run_id) == [(STATUS, "running"), (STATUS, "running")]
    with session_factory() as session:
        assert session.scalars(select(RoundMetric).where(RoundMetric.run_id == run_id)).first() is None
    assert lifecycle.record_round(store, new[0], _round(0))
    assert _row(session_factory, run_id).rounds_done == 1


def test_a_round_and_its_event_commit_together_once(session_factory: Factory) -> None:
    run_id = insert_run(session_factory)
    wakes = Wakes()
    store = RunStore(session_factory, wakes)
    claimed = lifecycle.claim(store, run_id, "a", 30.0)
    assert claimed is not None
    lease = claimed[0]
    results = [_round(i) for i in range(3)]
    assert [lifecycle.record_round(store, lease, r) for r in results] == [True, True, True]
    assert not lifecycle.record_round(store, lease, results[1])  # re-run after a crash: nothing new
    assert _row(session_factory, run_id).rounds_done == 3  # never goes back
    assert event_summary(session_factory, run_id) == [(STATUS, "running"), (ROUND, 0), (ROUND, 1), (ROUND, 2)]
    assert wakes.keys == ["running", 0, 1, 2]


def test_a_round_event_carries_a_bounded_number_of_device_records(
    session_factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's size must not multiply into every live stream: the event carries the first device
    records and says how many the round has; the database stores them all."""
    monkeypatch.setattr(lifecycle, "ROUND_EVENT_DEVICES", 4)
    run_id = insert_run(session_factory)
    store = RunStore(session_factory)
    claimed = lifecycle.claim(store, run_id, "a", 30.0)
    assert isinstance(claimed, tuple)
    result = _round(0)
    assert lifecycle.record_round(store, claimed[0], result)
    with session_factory() as session:
        event = session.scalars(
            select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.kind == ROUND)
        ).one()
        stored = session.scalar(
            select(func.count()).select_from(DeviceMetric).where(DeviceMetric.run_id == run_id)
        )
    assert len(result.devices) == 6 and stored == 6
    assert event.data["devices_total"] == 6
    assert event.data["devices"] == [d.to_json() for d in result.devices[:4]]
    assert event.data["round"]["round"] == 0


@pytest.mark.parametrize("point", ["round-before-commit", "status-change"])
def test_a_crash_inside_a_transition_leaves_neither_state_nor_event(
    session_factory: Factory, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    run_id = insert_run(session_factory)
    store = RunStore(session_factory)
    claimed = lifecycle.claim(store, run_id, "a", 30.0)
    assert claimed is not None

    class Crash(BaseException):
        pass

    def crash(name: str, key: object) -> None:
        if name == point:
            raise Crash

    monkeypatch.setattr(lifecycle, "crash_point", crash)
    with pytest.raises(Crash):
        if point == "round-before-commit":
            lifecycle.record_round(store, claimed[0], _round(0))
        else:
            lifecycle.finish(store, claimed[0], "succeeded", None)
    row = _row(session_factory, run_id)
    assert (row.status, row.rounds_done) == ("running", 0)
    assert event_summary(session_factory, run_id) == [(STATUS, "running")]


@pytest.mark.deployments("production")  # SQLite has one writer at a time by design
def test_a_worker_held_inside_its_rounds_transaction_delays_no_other_run_nor_a_launch(
    database_url: str, session_factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The frozen-outbox trial: a worker stops inside a round's transaction (its rows and event
    written, not committed). Another run is claimed and records rounds with their events, and a run
    is launched, meanwhile: on connections where any wait for a lock longer than a second fails."""
    held_run, other_run = insert_run(session_factory), insert_run(session_factory)
    store = RunStore(session_factory)
    held = lifecycle.claim(store, held_run, "held", 30.0)
    assert isinstance(held, tuple)
    inside, release = threading.Event(), threading.Event()

    def hold(name: str, key: object) -> None:
        if name == "round-before-commit" and threading.current_thread().name == "held":
            inside.set()
            assert release.wait(60)

    monkeypatch.setattr(lifecycle, "crash_point", hold)
    worker = threading.Thread(target=lifecycle.record_round, args=(store, held[0], _round(0)), name="held")
    worker.start()
    assert inside.wait(30)
    impatient = make_engine(database_url, SessionLimits(idle_in_transaction_s=60.0, lock_timeout_s=1.0))
    try:
        others = RunStore(make_session_factory(impatient))
        claimed = lifecycle.claim(others, other_run, "other", 30.0)
        assert isinstance(claimed, tuple)
        for index in range(3):
            assert lifecycle.record_round(others, claimed[0], _round(index))
        with make_session_factory(impatient)() as session:
            launched = Run(name="launched", config=tiny_config(), total_rounds=5, policy="uniform")
            launched.executor, launched.V, launched.num_clusters, launched.devices_per_cluster = (
                "analytic",
                1,
                2,
                3,
            )
            lifecycle.create(session, launched, Wakes())
            session.commit()
    finally:
        release.set()
        worker.join(30)
        impatient.dispose()
    assert event_summary(session_factory, other_run) == [(STATUS, "running"), *((ROUND, i) for i in range(3))]
    assert event_summary(session_factory, launched.id) == [(STATUS, "queued")]
    # the held round commits once released, after the events committed meanwhile
    assert event_summary(session_factory, held_run) == [(STATUS, "running"), (ROUND, 0)]
    with session_factory() as session:
        positions = dict(
            session.execute(
                select(RunEvent.run_id, func.max(RunEvent.position)).group_by(RunEvent.run_id)
            ).all()
        )
    assert positions[held_run] > positions[other_run] and positions[held_run] > positions[launched.id]


def test_finish_releases_the_lease_and_reports_the_error(session_factory: Factory) -> None:
    run_id = insert_run(session_factory)
    store = RunStore(session_factory)
    claimed = lifecycle.claim(store, run_id, "a", 30.0)
    assert claimed is not None
    assert lifecycle.finish(store, claimed[0], "failed", "boom")
    row = _row(session_factory, run_id)
    assert (row.status, row.error, row.lease_owner, row.lease_expires_at) == ("failed", "boom", None, None)
    with session_factory() as session:
        last = session.scalars(select(RunEvent).where(RunEvent.run_id == run_id).order_by(RunEvent.id.desc()))
        assert next(iter(last)).data == {
            "run_id": run_id,
            "status": "failed",
            "rounds_done": 0,
            "total_rounds": 5,
            "error": "boom",
        }


def test_requeue_stale_takes_only_expired_leases(session_factory: Factory) -> None:
    live, stale, queued = (insert_run(session_factory) for _ in range(3))
    store = RunStore(session_factory)
    assert lifecycle.claim(store, live, "a", 30.0) and lifecycle.claim(store, stale, "b", 30.0)
    _expire(session_factory, stale)
    rows = lifecycle.requeue_stale(store)
    assert [(r.run_id, r.status) for r in rows] == [(stale, "queued")]
    assert event_summary(session_factory, stale)[-1] == (STATUS, "queued")
    assert (
        _row(session_factory, live).status == "running" and _row(session_factory, queued).status == "queued"
    )
    assert lifecycle.requeue_stale(store) == []


def test_release_and_fail_orphan_need_the_claimants_token(session_factory: Factory) -> None:
    first, second = insert_run(session_factory), insert_run(session_factory)
    store = RunStore(session_factory)
    assert lifecycle.claim(store, first, "a", 30.0) and lifecycle.claim(store, second, "b", 30.0)
    assert not lifecycle.release(store, Lease(first, "someone-else", 30.0))
    assert lifecycle.release(store, Lease(first, "a", 30.0))
    assert event_summary(session_factory, first)[-1] == (STATUS, "queued")
    assert not lifecycle.fail_orphan(store, second, "a", "gone")
    assert lifecycle.fail_orphan(store, second, "b", "exit code -9")
    assert (_row(session_factory, second).status, _row(session_factory, second).error) == (
        "failed",
        "exit code -9",
    )


def test_api_side_transitions_write_their_events_in_the_callers_transaction(session_factory: Factory) -> None:
    wakes = Wakes()
    with session_factory() as session:
        run = Run(
            name="r",
            config=tiny_config(),
            total_rounds=5,
            policy="uniform",
            executor="analytic",
            V=1.0,
            num_clusters=2,
            devices_per_cluster=3,
        )
        lifecycle.create(session, run, wakes)
        run_id = run.id
        session.rollback()  # the request failed after create: nothing of it stays
    assert _row_missing(session_factory, run_id)
    queued, running, done = (insert_run(session_factory) for _ in range(3))
    store = RunStore(session_factory)
    assert lifecycle.claim(store, running, "a", 30.0)
    done_claim = lifecycle.claim(store, done, "b", 30.0)
    assert done_claim is not None and lifecycle.finish(store, done_claim[0], "failed", "x")
    with session_factory() as session:
        assert lifecycle.cancel(session, queued, wakes) == "cancelled"
        assert lifecycle.cancel(session, running, wakes) == "requested"
        assert lifecycle.cancel(session, done, wakes) is None
        assert lifecycle.resume(session, done, wakes)
        assert not lifecycle.resume(session, running, wakes)
        assert lifecycle.delete(session, running) == "running"
        session.commit()
    assert event_summary(session_factory, queued)[-1] == (STATUS, "cancelled")
    assert event_summary(session_factory, running) == [(STATUS, "running")]  # a request, not a transition
    assert _row(session_factory, running).cancel_requested
    assert event_summary(session_factory, done)[-1] == (STATUS, "queued")
    with session_factory() as session:
        assert lifecycle.delete(session, queued) is None
        session.commit()
    assert _row_missing(session_factory, queued) and event_summary(session_factory, queued) == []


def _row_missing(factory: Factory, run_id: int) -> bool:
    with factory() as session:
        return session.get(Run, run_id) is None


# -- one owner ----------------------------------------------------------------------------------------

OWNER = REPO / "backend" / "runtime" / "repository.py"
RUN_STATE_COLUMNS = {
    "status",
    "lease_owner",
    "lease_expires_at",
    "heartbeat_at",
    "attempt",
    "rounds_done",
    "checkpoint",
}


def _writes_of_run_state(tree: ast.AST) -> list[int]:
    """Lines that write a run's status or lease: ``update(Run)``/``insert(Run)``, ``Run(status=...)``,
    SQL text updating ``runs``, or an assignment to one of those attributes."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
            "update",
            "insert",
        ):
            if any(isinstance(a, ast.Name) and a.id == "Run" for a in node.args):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Run":
            if any(k.arg in RUN_STATE_COLUMNS for k in node.keywords):
                lines.append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "update runs" in node.value.lower():
                lines.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in RUN_STATE_COLUMNS:
                    lines.append(node.lineno)
    return lines


def test_only_the_runtime_repository_writes_run_status_and_lease() -> None:
    """The product's code writes a run's status and lease columns in one module only (tests write
    rows directly to set up situations)."""
    offenders = []
    for package in ("backend", "workers", "collapipe_core"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path == OWNER:
                continue
            lines = _writes_of_run_state(ast.parse(path.read_text(), str(path)))
            offenders += [f"{path.relative_to(REPO)}:{line}" for line in lines]
    assert offenders == []
    assert _writes_of_run_state(ast.parse(OWNER.read_text()))  # the check finds the owner's writes
