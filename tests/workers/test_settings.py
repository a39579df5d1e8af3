"""Worker settings: the backend's settings plus the worker-only fields, all from COLLAPIPE_* env."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from backend.settings import Settings
from workers.settings import WorkerSettings, worker_settings_from


def test_worker_fields_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLLAPIPE_VISIBILITY_TIMEOUT_S", "90")
    monkeypatch.setenv("COLLAPIPE_REDIS_URL", "redis://r:6379/2")
    settings = WorkerSettings()
    assert settings.visibility_timeout_s == 90 and settings.redis_url == "redis://r:6379/2"


def test_api_settings_are_kept_when_extended(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLLAPIPE_RUN_QUEUE", "q2")
    api = Settings(redis_url="redis://api:6379/1", lease_s=12)
    worker = worker_settings_from(api)
    assert (worker.redis_url, worker.lease_s, worker.run_queue) == ("redis://api:6379/1", 12, "q2")
    assert worker_settings_from(worker) is worker


def test_torch_threads_default_to_one_per_worker_process() -> None:
    assert WorkerSettings().torch_threads() == 1
    assert WorkerSettings(threads_per_run=4).torch_threads() == 4


def test_a_bad_value_names_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLLAPIPE_VISIBILITY_TIMEOUT_S", "-1")
    with pytest.raises(ValidationError, match="visibility_timeout_s"):
        WorkerSettings()
