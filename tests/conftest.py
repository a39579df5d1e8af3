"""Test-wide settings: one torch thread (deterministic, no oversubscription on small machines)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _single_torch_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Browser tests last: Playwright's sync API keeps an event loop running in the main thread while its
    session fixtures are open, which would break later tests that call asyncio.run()."""
    items.sort(key=lambda item: item.get_closest_marker("e2e") is not None)
