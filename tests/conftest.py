"""Test-wide settings: one torch thread (deterministic, no oversubscription on small machines), browser
tests last, and the groups that keep a shared server's tests in one process under ``make test``'s
``pytest -n 2 --dist loadgroup``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import torch


@pytest.fixture(autouse=True)
def _single_torch_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def server_group(nodeid: str) -> str | None:
    """The worker group of a test whose session servers are shared (None: any worker may run it).

    - ``e2e-embedded``: the browser tests on the embedded deployment's server;
    - ``e2e-production``: those on the production server, and the browser tests that start servers of
      their own (they balance the two groups' times);
    - ``integration``: the Celery/Redis/PostgreSQL stack of tests/integration.

    Ungrouped tests (the API on both deployments, the core, the workers) go one by one to whichever
    worker is free; each worker that needs the API suite's production stack starts its own."""
    if nodeid.startswith("tests/e2e/"):
        params = nodeid.partition("[")[2]
        return "e2e-embedded" if re.search(r"\bembedded\b", params) else "e2e-production"
    if nodeid.startswith("tests/integration/"):
        return "integration"
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` with the groups of :func:`server_group`, in collection order (browser tests
    last on every worker, see below). pytest-xdist's own loadgroup reads ``xdist_group`` markers into
    node ids, which pytest 9's structured node ids no longer allow."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ServerGroups(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return server_group(nodeid) or nodeid

    config.option.loadscopereorder = False
    return ServerGroups(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Browser tests last: Playwright's sync API keeps an event loop running in the main thread while its
    session fixtures are open, which would break later tests that call asyncio.run(). Each worker runs
    its tests in this order, so there too the browser groups come after everything else."""
    items.sort(key=lambda item: item.get_closest_marker("e2e") is not None)
