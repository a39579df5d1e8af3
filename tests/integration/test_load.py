"""Many clients at once, on both deployments, against the real service started as an operator would:

100 SSE streams open at the same moment on a running run while the run listing is requested 50 times
a second for 10 s and readiness is polled. Every stream must open and receive every round of the run
and its final status, the listing must answer every request (10 s timeout), and readiness must never
report a starved connection pool. Through Redis, a stream of all runs' status changes must stay open
26 s with a 6 s heartbeat, receiving at least 4 keep-alives (each read blocks longer than redis-py's
5 s default socket timeout, as with the production heartbeat of 15 s). Latencies are printed
(``pytest -s``), never asserted: bench/service.py reports them.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.backend.builders import PACED_POLICY, TEST_POLICIES, tiny_config
from tests.deployment_params import PRODUCTION, deployment_params
from tests.e2e.server import running_server
from tests.integration.processes import REPO
from tests.integration.stream_load import stream_load

ROUNDS = 50  # ~12.5 s at PacedUniform's four rounds a second: outlasts the 10 s of listing
STREAMS = 100
LISTING_RATE = 50.0
LISTING_S = 10.0
IDLE_S = 26.0


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "deployment" in metafunc.fixturenames:
        metafunc.parametrize("deployment", deployment_params(metafunc))


def test_many_streams_and_a_busy_listing_on_a_running_run(deployment: str, tmp_path: Path) -> None:
    env = {
        "COLLAPIPE_POLICIES": json.dumps(TEST_POLICIES),
        "PYTHONPATH": str(REPO),
        "COLLAPIPE_SSE_HEARTBEAT_S": "6",
    }
    with running_server(tmp_path, deployment, env) as server:
        run_id = server.launch(tiny_config(training={"rounds": ROUNDS}, scheduler={"policy": PACED_POLICY}))
        server.wait_for_run(run_id, ("running",), timeout_s=120)
        idle_s = IDLE_S if deployment == PRODUCTION else None
        report = asyncio.run(
            stream_load(
                server.url,
                server.token,
                run_id,
                streams=STREAMS,
                rate=LISTING_RATE,
                seconds=LISTING_S,
                idle_s=idle_s,
            )
        )
        # the API's log without its access lines: what a failed stream left there
        log = "\n".join(
            line for line in server.log_path.read_text(errors="replace").splitlines() if '" 200' not in line
        )
    print(f"\n{deployment}: {json.dumps(report.summary())}")

    failed = [s for s in report.streams if s.status != 200 or s.error or len(s.rounds) != ROUNDS]
    assert not failed, f"{len(failed)} streams failed, e.g. {failed[0]}\n{log[-6000:]}"
    assert {s.final_status for s in report.streams} == {"succeeded"}
    assert len(report.listing.latencies_ms) == LISTING_RATE * LISTING_S
    assert report.listing.errors == 0 and report.listing.timeouts == 0, report.listing.summary()
    assert set(report.readiness) == {"ok"}, report.readiness
    if idle_s is not None:
        idle = report.idle
        assert idle is not None and idle.error is None and not idle.closed_early, idle
        assert idle.open_s >= IDLE_S and idle.keepalives >= 4, idle
