"""Crash injection: a listed point kills the process once; other points and a second pass do not."""

from __future__ import annotations

import multiprocessing
import signal
from pathlib import Path

import pytest

from collapipe_core.faults import CRASH_AT, CRASH_MARKER, crash_point


def _reach(points: list[tuple[str, object]]) -> None:
    for point, key in points:
        crash_point(point, key)


def _exit_code(points: list[tuple[str, object]]) -> int | None:
    process = multiprocessing.get_context("fork").Process(target=_reach, args=(points,))
    process.start()
    process.join(10)
    return process.exitcode


def test_a_listed_point_kills_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CRASH_AT, "round-after-commit@3,status-change@succeeded")
    monkeypatch.setenv(CRASH_MARKER, str(tmp_path))
    assert _exit_code([("round-after-commit", 2), ("status-change", "failed")]) == 0
    assert _exit_code([("round-after-commit", 3)]) == -signal.SIGKILL
    assert (tmp_path / "round-after-commit@3").is_file()
    assert _exit_code([("round-after-commit", 3)]) == 0  # the process taking over gets past it
    assert _exit_code([("status-change", "succeeded")]) == -signal.SIGKILL


def test_off_without_the_setting_and_refused_without_a_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CRASH_AT, raising=False)
    crash_point("round-after-commit", 3)
    monkeypatch.setenv(CRASH_AT, "round-after-commit@3")
    monkeypatch.delenv(CRASH_MARKER, raising=False)
    with pytest.raises(RuntimeError, match="repeat forever"):
        crash_point("round-after-commit", 3)
