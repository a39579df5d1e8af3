"""The Celery settings that make runs survive crashes and duplicates."""

from __future__ import annotations

from pathlib import Path

from backend.runtime.celery_app import (
    MAINTENANCE_QUEUE,
    REAP_TASK,
    RUN_TASK,
    celery_config,
    create_celery_app,
)
from backend.settings import Settings


def _settings(**values: object) -> Settings:
    return Settings(redis_url="redis://broker:6379/3", artifact_dir=Path("/shared"), **values)  # type: ignore[arg-type]


def test_late_acks_requeue_on_worker_loss_and_one_message_per_process() -> None:
    config = celery_config(_settings())
    assert config["task_acks_late"] is True
    assert config["task_reject_on_worker_lost"] is True
    assert config["worker_prefetch_multiplier"] == 1
    assert config["broker_url"] == "redis://broker:6379/3"


def test_no_result_backend_is_used() -> None:
    config = celery_config(_settings())
    assert config["result_backend"] is None and config["task_ignore_result"] is True


def test_visibility_timeout_defaults_above_a_long_run_and_is_configurable() -> None:
    assert celery_config(_settings())["broker_transport_options"] == {
        "visibility_timeout": 12 * 3600.0,
        "unacked_restore_interval": 60.0,
        "unacked_restore_throttle": 1,
    }
    short = celery_config(_settings(visibility_timeout_s=5, redelivery_check_s=1))
    assert short["broker_transport_options"]["visibility_timeout"] == 5  # type: ignore[index]


def test_runs_and_reaper_sweeps_use_separate_queues() -> None:
    app = create_celery_app(_settings(run_queue="runs-q", reaper_interval_s=7))
    assert app.conf.task_default_queue == "runs-q"
    assert app.conf.task_routes[REAP_TASK] == {"queue": MAINTENANCE_QUEUE}
    assert app.conf.beat_schedule["reap-stale-runs"]["schedule"] == 7
    assert RUN_TASK not in app.conf.task_routes


def test_a_key_prefix_moves_every_kombu_key() -> None:
    options = celery_config(_settings(redis_key_prefix="team-a:"))["broker_transport_options"]
    assert options["global_keyprefix"] == "team-a:"  # type: ignore[index]
    assert "global_keyprefix" not in celery_config(_settings())["broker_transport_options"]  # type: ignore[operator]
