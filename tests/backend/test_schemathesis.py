"""Property-based API check: schemathesis generates requests from the served OpenAPI document and
every response must be a non-5xx that its operation documents (status, content type, schema,
headers). Authenticated as admin; SSE operations are left out (they stream until a run ends).

The number of generated requests is printed (``pytest -s``) for the service note.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy.orm import Session, sessionmaker

from backend.db.models import ApiToken, Experiment, User
from backend.runtime.execution import execute_run
from backend.runtime.lifecycle import RunStore
from backend.users.security import hash_password, hash_secret
from tests.backend.builders import insert_run, service_workspace, tiny_config
from tests.backend.conftest import RecordingDispatcher
from tests.backend.live_server import serve

MAX_EXAMPLES = 25  # per operation: ~30 operations, about 750 requests, stay well under a minute
STREAMING = {"/api/runs/events", "/api/runs/{run_id}/events", "/api/studies/{study_id}/events"}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
ADMIN_TOKEN = "cp_schemathesis_admin_token_0123456789"


def _admin(factory: sessionmaker[Session]) -> None:
    with factory() as session:
        admin = User(username="admin", password_hash=hash_password("admin password"), role="admin")
        session.add(admin)
        session.flush()
        # a far-away id, so generated DELETE /api/tokens/{id} calls do not revoke the caller's token
        session.add(
            ApiToken(id=1_000_000_007, user_id=admin.id, name="st", token_hash=hash_secret(ADMIN_TOKEN))
        )
        session.commit()


def _seed(factory: sessionmaker[Session], artifact_dir: Path) -> None:
    """Id 1 of each resource exists (the OpenAPI examples use id 1): an experiment and a finished run."""
    with factory() as session:
        session.add(Experiment(name="seed", config=tiny_config(), owner_id=1))
        session.commit()
    run_id = insert_run(factory, experiment_id=1, owner_id=1)
    assert (
        execute_run(
            run_id,
            RunStore(factory),
            claimant="seed",
            artifact_dir=artifact_dir,
            workspace=service_workspace(artifact_dir / "data"),
        )
        == "succeeded"
    )


@pytest.fixture
def base_url(
    app_factory: Callable[..., FastAPI], session_factory: sessionmaker[Session], tmp_path: Path
) -> Iterator[str]:
    _admin(session_factory)
    _seed(session_factory, tmp_path / "artifacts")
    with serve(app_factory(RecordingDispatcher())) as url:
        yield url


def test_no_server_errors_and_no_schema_violations(base_url: str) -> None:
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    requests_sent = 0
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation: Any = cast(Any, result).ok()
        if operation.path in STREAMING:
            continue

        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def check(case: Any) -> None:
            nonlocal requests_sent
            response = case.call(base_url=base_url, headers=headers, timeout=60)
            requests_sent += 1
            statuses[response.status_code] += 1
            case.validate_response(response, checks=CHECKS)

        try:
            check()
        except (
            Exception,
            BaseExceptionGroup,
        ) as err:  # collect every operation's failure, then report them together
            failures.append(f"{operation.method.upper()} {operation.path}: {err}")
    print(f"\nschemathesis: {requests_sent} generated requests, statuses {dict(sorted(statuses.items()))}")
    assert requests_sent > 100 and statuses[401] < requests_sent / 10  # authenticated: most calls get in
    assert failures == [], "\n\n".join(failures)
