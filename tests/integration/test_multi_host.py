"""The production stack across hosts, for real: a database host and two worker hosts, each a network
namespace on a private bridge (tests/integration/netns.py), reaching each other only over it.

The database host runs a PostgreSQL cluster and a Redis of its own on its bridge address; the API and
the reaper run in the test's (root) namespace and reach them over the bridge too; the worker hosts
share nothing with the rest but the artifact directory on disk.

- A worker host that vanishes mid-run (every one of its processes SIGKILLed): the run finishes on the
  other host, every round exactly once in the database and exactly once on the live stream.
- A ``distributed`` run whose ranks are spread over the two worker hosts through the documented
  multi-host rendezvous (docs/distributed.md, "Several hosts") gives the single-host run's records.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from backend.db.engine import make_engine, make_session_factory
from backend.migrations import upgrade_to_head
from backend.users.service import bootstrap
from collapipe_core.pipeline.distributed.launch import WORKER_MODULE, rank_environment
from collapipe_core.records import RoundResult
from collapipe_core.runner import Runner
from collapipe_core.sinks import MemorySink, read_json_lines
from collapipe_core.validation import parse_config
from tests.core.builders import tiny_config
from tests.integration.conftest import Stack, service_env
from tests.integration.netns import Host, Network, host_network, netns_unavailable, postgres_on, redis_on
from tests.integration.processes import REPO, ProcessGroup, free_port, wait_until
from tests.integration.runs import (
    TERMINAL,
    comparable,
    config_json,
    continuous_records,
    launch,
    stored_rounds,
    stream_rounds,
    wait_for,
)
from tests.integration.sse import sse_events

Event = tuple[str, str, dict[str, Any]]
REDIS_PREFIX = "multi-host:"  # the database host's Redis is ours alone; the services still use a prefix


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(f"the multi-host tests build network namespaces: {reason}")
    with host_network(("db", "worker-1", "worker-2")) as network:
        yield network


@pytest.fixture(scope="module")
def database_host(network: Network, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(database URL, Redis URL) of the database host's own PostgreSQL (migrated) and Redis."""
    host, logs = network.hosts["db"], tmp_path_factory.mktemp("db-host")
    with (
        postgres_on(host, network.subnet, logs / "postgres.log") as admin_url,
        redis_on(host, logs / "redis.log") as redis_url,
    ):
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute("CREATE DATABASE collapipe")
        database_url = admin_url.replace("postgresql://", "postgresql+psycopg://").removesuffix("/postgres")
        database_url += "/collapipe"
        with warnings.catch_warnings():
            # alembic.ini without path_separator (backend's file): a DeprecationWarning, not a fault
            warnings.filterwarnings("ignore", message="No path_separator found", category=DeprecationWarning)
            upgrade_to_head(database_url)
        yield database_url, redis_url


@pytest.fixture
def stack(
    network: Network, database_host: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    """The API (in the root namespace) on the database host's services, with an admin token, and a
    Celery worker on worker-1 (started first: its start-up overlaps the API's)."""
    database_url, redis_url = database_host
    artifacts = tmp_path / "artifacts"
    env = service_env(database_url, redis_url, REDIS_PREFIX, artifacts)
    processes = ProcessGroup(env, tmp_path / "logs")
    try:
        processes.start_worker(prefix=network.hosts["worker-1"].prefix)
        port = free_port()
        processes.start_api(port)
        token = secrets.token_urlsafe(24)
        engine = make_engine(database_url)
        with make_session_factory(engine)() as session:
            bootstrap(session, token)
            session.commit()
        engine.dispose()
        yield Stack(
            database_url,
            redis_url,
            REDIS_PREFIX,
            artifacts,
            env,
            f"http://127.0.0.1:{port}",
            processes,
            token,
        )
        if getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed:
            print(processes.logs())
    finally:
        processes.close()


class LeaseWatch:
    """Every claim of a run as the runs table shows it: (attempt, host name of the lease owner).

    A lease owner is ``host:pid:task:random`` (workers.tasks.claimant_name); the row is polled every
    20 ms, so any claim held for longer than that is seen."""

    def __init__(self, database_url: str, run_id: int) -> None:
        self.url = database_url.replace("postgresql+psycopg://", "postgresql://")
        self.run_id = run_id
        self.claims: list[tuple[int, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> LeaseWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _watch(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.wait(0.02):
                row = conn.execute(
                    "SELECT attempt, lease_owner FROM runs WHERE id = %s", (self.run_id,)
                ).fetchone()
                if row is not None and row[1] is not None:
                    claim = (int(row[0]), str(row[1]).split(":")[0])
                    if claim not in self.claims:
                        self.claims.append(claim)


class LiveReader:
    """The API's SSE stream of a run, read from the start in a thread (as a browser's EventSource) while
    the test goes on; the stream ends after the run's terminal status. Leaving the block closes it."""

    def __init__(self, stack: Stack, run_id: int) -> None:
        self.run_id = run_id
        self.events: list[Event] = []
        self.error: BaseException | None = None
        self._client = stack.client()
        self._thread = threading.Thread(target=self._read, daemon=True)

    def __enter__(self) -> LiveReader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.close()  # a reader still waiting fails at its next heartbeat and ends
        self._thread.join(timeout=10)

    def _read(self) -> None:
        try:
            with self._client.stream("GET", f"/api/runs/{self.run_id}/events", timeout=60.0) as response:
                assert response.status_code == 200, response.read()
                for event in sse_events(response):
                    self.events.append((event.id, event.kind, event.data))
        except BaseException as err:
            self.error = err

    def result(self, timeout_s: float) -> list[Event]:
        """Every event of the stream, once it ended."""
        self._thread.join(timeout=timeout_s)
        assert not self._thread.is_alive(), f"the stream of run {self.run_id} did not end: {self.events[-3:]}"
        if self.error is not None:
            raise self.error
        return self.events


def _assert_every_round_once(events: list[Event], rounds: int) -> None:
    assert stream_rounds(events) == list(range(rounds))  # every round once, in order: no tolerance
    ids = [int(event_id) for event_id, _kind, _data in events]
    assert ids == sorted(set(ids))


ROUNDS = 40  # 50-500 ms a round on 2 cores: the run is far from done when its host is lost
KILL_AFTER = 5  # rounds


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.celery
def test_a_run_whose_worker_host_is_lost_finishes_on_the_other_host_exactly_once(
    stack: Stack, network: Network
) -> None:
    first, second = network.hosts["worker-1"], network.hosts["worker-2"]
    stack.processes.start_reaper(interval_s=0.5)
    config = config_json(ROUNDS)
    with stack.client() as client:
        run_id = launch(client, config)
        # a live reader from the start, through the loss; the run's claims as the runs table shows them
        with LiveReader(stack, run_id) as live, LeaseWatch(stack.database_url, run_id) as watch:
            wait_for(client, run_id, 60, stack.processes.logs, status=("running",))
            survivor = stack.processes.start_worker(prefix=second.prefix, loglevel="info")
            before = wait_for(client, run_id, 60, stack.processes.logs, rounds_done=KILL_AFTER)
            attempt_at_loss = max(attempt for attempt, _host in watch.claims)
            killed = first.kill_all()
            wait_until(lambda: not first.pids(), 10, lambda: f"still on {first.name}: {first.pids()}")
            run = wait_for(client, run_id, 120, stack.processes.logs, status=TERMINAL)
            events = live.result(timeout_s=30)

    assert killed and before["status"] == "running" and before["rounds_done"] < ROUNDS, before
    assert run["status"] == "succeeded", run
    assert run["rounds_done"] == ROUNDS and run["attempt"] >= 2, run
    # the run was on worker-1 when it was lost, and every later claim is worker-2's
    assert watch.claims[0] == (1, first.name), watch.claims
    assert {host for attempt, host in watch.claims if attempt <= attempt_at_loss} == {first.name}
    assert {host for attempt, host in watch.claims if attempt > attempt_at_loss} == {second.name}
    assert watch.claims[-1] == (run["attempt"], second.name), watch.claims
    assert re.search(rf"\brun {run_id}\b.*\bsucceeded\b", survivor.log()), survivor.log()  # its task's log

    stored = stored_rounds(stack.database_url, run_id)
    assert [r["round"] for r in stored] == list(range(ROUNDS))  # no gap, no duplicate
    # resumed on the other host from the shared checkpoint: the records of an uninterrupted run
    assert [comparable(r) for r in stored] == continuous_records(config)
    _assert_every_round_once(events, ROUNDS)  # the live reader, connected before the loss
    statuses = [data["status"] for _id, kind, data in events if kind == "status"]
    assert statuses[-1] == "succeeded" and statuses.count("running") >= 2
    assert stack.stream(run_id) == events  # read again from the start: the same events


# -- a distributed run over two hosts ----------------------------------------------------------------

MASTER_PORT = 29500  # the documented fixed port (free: the worker host's namespace is ours)
DRIVER_RANKS = (0, 1)  # c0-cu, c0-d0 with the driver on worker-1; c0-d1 and c0-edge on worker-2
OTHER_RANKS = (2, 3)


def _distributed_config() -> dict[str, Any]:
    """1 cluster × 2 devices (4 ranks), both devices scheduled each round (uniform), 2 rounds."""
    config = tiny_config(
        executor="distributed",
        network={"num_clusters": 1, "devices_per_cluster": 2, "energy_budget_j": 0.05},
        model={"dropout": 0.0, "num_blocks": 4},
        data={"samples_per_cluster": 64, "eval_samples": 32},
        training={"rounds": 2, "local_iterations": 1},
    )
    data: dict[str, Any] = config.model_dump(mode="json", by_alias=True)
    return data


def _on(host: Host, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    argv = host.command(argv)
    with log.open("wb") as out:
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=out, start_new_session=True)


@pytest.mark.distributed
def test_a_distributed_run_over_two_hosts_gives_the_single_host_records(
    network: Network, tmp_path: Path
) -> None:
    driver_host, other_host = network.hosts["worker-1"], network.hosts["worker-2"]
    config = _distributed_config()
    (tmp_path / "config.json").write_text(json.dumps(config))
    records = tmp_path / "records.jsonl"
    world_size = len(DRIVER_RANKS) + len(OTHER_RANKS)
    # docs/distributed.md, "Several hosts", step 1: the store on an address the other host reaches
    driver_argv = [sys.executable, "-m", "tests.integration.multi_host_driver", str(tmp_path / "config.json")]
    driver_argv += [str(records), "--master-addr", driver_host.address, "--master-port", str(MASTER_PORT)]
    driver_argv += ["--local-ranks", ",".join(map(str, DRIVER_RANKS))]
    # step 3: gloo binds to the interface the other host reaches (the host names resolve to nothing)
    driver_env = {**os.environ, "GLOO_SOCKET_IFNAME": driver_host.interface}
    processes = [_on(driver_host, driver_argv, driver_env, tmp_path / "driver.log")]
    try:
        # step 2: the other host's ranks, each with the documented command and torchrun's variables
        for local_rank, rank in enumerate(OTHER_RANKS):
            base = {**os.environ, "GLOO_SOCKET_IFNAME": other_host.interface}
            env = rank_environment(
                base, rank, world_size, driver_host.address, MASTER_PORT, local_rank, len(OTHER_RANKS)
            )
            argv = [sys.executable, "-m", WORKER_MODULE]
            processes.append(_on(other_host, argv, env, tmp_path / f"rank-{rank}.log"))
        driver = processes[0]
        wait_until(lambda: driver.poll() is not None, 240, lambda: _logs(tmp_path), poll_s=0.2)
        assert driver.returncode == 0, _logs(tmp_path)
        # told to stop by the driver, the other host's ranks exit
        wait_until(lambda: all(p.poll() is not None for p in processes), 30, lambda: _logs(tmp_path))
        assert [p.returncode for p in processes] == [0] * len(processes), _logs(tmp_path)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(10)

    got = read_json_lines(records)
    assert [r.round.round for r in got] == [0, 1]
    for result in got:  # every rank trained and measured, on both hosts
        assert set(result.round.measured) == {"c0-cu", "c0-d0", "c0-d1", "c0-edge"}, result.round.measured
    # the same config on one host (this one; every rank started by the driver, the store on 127.0.0.1)
    single_host = MemorySink()
    runner = Runner(parse_config(config), single_host)
    try:
        runner.run()
    finally:
        runner.executor.close()  # type: ignore[attr-defined]
    assert [_comparable(r) for r in got] == [_comparable(r) for r in single_host.results]


def _logs(directory: Path) -> str:
    return "\n".join(f"===== {path.name}\n{path.read_text()}" for path in sorted(directory.glob("*.log")))


def _comparable(result: RoundResult) -> dict[str, Any]:
    """A round's records without what the clock measured (solve time, the ranks' times and memory)."""
    data = result.to_json()
    data["round"].pop("solve_time_s")
    data["round"].pop("measured")
    for device in data["devices"]:
        device.pop("measured")
    return data
