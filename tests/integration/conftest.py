"""The production stack for real: PostgreSQL + Redis on 127.0.0.1, the API under uvicorn and Celery
worker processes, all started here and all stopped even when a test fails.

Timings are shortened so recovery takes seconds: a 3 s lease, a 5 s visibility timeout swept every
second, and (where a test starts one) a reaper sweeping every 0.5 s.
"""

from __future__ import annotations

import secrets
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from backend.db.engine import make_engine, make_session_factory
from backend.users.service import bootstrap
from tests.integration.processes import ProcessGroup, free_port
from tests.integration.sse import sse_events
from tests.workers.services import delete_keys, fresh_postgres_database, redis_namespace, truncate_all

REDIS_DB = 13
LEASE_S = 3.0

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.celery]


@dataclass
class Stack:
    database_url: str
    redis_url: str
    redis_prefix: str  # COLLAPIPE_REDIS_KEY_PREFIX: this session's keys only
    artifact_dir: Path
    env: dict[str, str]
    api_url: str
    processes: ProcessGroup
    token: str = ""

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.Client(base_url=self.api_url, headers=headers, timeout=30.0)

    def redis(self) -> Any:
        return redis.Redis.from_url(self.redis_url, decode_responses=True)

    def stream(self, run_id: int, after: str | None = None) -> list[tuple[str, str, dict[str, Any]]]:
        """(id, kind, data) of every event the API's SSE stream of a finished run sends, from the start
        or after ``after`` (what a browser that connects, or reconnects with Last-Event-ID, receives)."""
        headers = {"Last-Event-ID": after} if after is not None else {}
        with (
            self.client() as client,
            client.stream("GET", f"/api/runs/{run_id}/events", headers=headers, timeout=60.0) as response,
        ):
            if response.status_code == 204:
                return []
            assert response.status_code == 200, response.read()
            return [(e.id, e.kind, e.data) for e in sse_events(response)]

    def queue_length(self) -> int:
        client = self.redis()
        length: int = client.llen(self.redis_prefix + "collapipe.runs")
        client.close()
        return length


def service_env(database_url: str, redis_url: str, redis_prefix: str, artifact_dir: Path) -> dict[str, str]:
    return {
        "COLLAPIPE_DATABASE_URL": database_url,
        "COLLAPIPE_REDIS_URL": redis_url,
        "COLLAPIPE_REDIS_KEY_PREFIX": redis_prefix,
        "COLLAPIPE_ARTIFACT_DIR": str(artifact_dir),
        "COLLAPIPE_EXECUTOR": "celery",
        "COLLAPIPE_LEASE_S": str(LEASE_S),
        "COLLAPIPE_VISIBILITY_TIMEOUT_S": "5",
        "COLLAPIPE_REDELIVERY_CHECK_S": "1",
        "COLLAPIPE_THREADS_PER_RUN": "1",
        "COLLAPIPE_SSE_HEARTBEAT_S": "1",
        "OMP_NUM_THREADS": "1",
    }


@pytest.fixture(scope="session")
def _stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("stack")
    with (
        fresh_postgres_database("collapipe_it") as database_url,
        redis_namespace(REDIS_DB, "integration") as (redis_url, prefix),
    ):
        env = service_env(database_url, redis_url, prefix, root / "artifacts")
        processes = ProcessGroup(env, root / "logs")
        port = free_port()
        try:
            processes.start_api(port)
            yield Stack(
                database_url,
                redis_url,
                prefix,
                root / "artifacts",
                env,
                f"http://127.0.0.1:{port}",
                processes,
            )
        finally:
            processes.close()


@pytest.fixture
def stack(_stack: Stack, request: pytest.FixtureRequest) -> Iterator[Stack]:
    """The shared stack, emptied for this test, with an admin API token; workers stopped afterwards."""
    truncate_all(_stack.database_url)
    delete_keys(_stack.redis_url, _stack.redis_prefix)
    _stack.token = secrets.token_urlsafe(24)
    engine = make_engine(_stack.database_url)
    with make_session_factory(engine)() as session:
        bootstrap(session, _stack.token)
        session.commit()
    engine.dispose()
    api = _stack.processes.services[0]
    yield _stack
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for service in _stack.processes.services[1:]:
        service.terminate(timeout_s=5.0)
    if failed:
        print(_stack.processes.logs())
    del _stack.processes.services[1:]
    assert api.alive(), api.log()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
