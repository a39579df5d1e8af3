"""The LiveChannel contract on MemoryChannel and on DbEventChannel (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy.orm import Session, sessionmaker

from backend.live.channel import LiveChannel, MemoryChannel
from backend.live.db_channel import DbEventChannel
from tests.backend.builders import insert_run
from tests.backend.live.channel_contract import CHECKS

Check = Callable[[LiveChannel, int, int], None]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_memory_channel(check: Check) -> None:
    check(MemoryChannel(), 1, 2)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_db_event_channel(check: Check, session_factory: sessionmaker[Session]) -> None:
    run_a, run_b = insert_run(session_factory), insert_run(session_factory)
    check(DbEventChannel(session_factory, poll_interval_s=0.02), run_a, run_b)
