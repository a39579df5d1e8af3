"""Password guessing is throttled per username and per client address (429 with Retry-After, backing
off), concurrent password checks are bounded, and an unknown username costs a password check too."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import pytest
from argon2 import PasswordHasher
from fastapi import FastAPI

from backend.errors import TooManyRequests
from backend.users import security
from backend.users.login_guard import LoginGuard
from tests.backend.client import SyncClient
from tests.backend.conftest import PASSWORD, Api, RecordingDispatcher

pytestmark = pytest.mark.deployments("embedded")  # in-memory rules of one API process


def _login(api: Api, username: str, password: str) -> Any:
    return api.client.post("/api/auth/login", json={"username": username, "password": password})


def test_a_username_is_locked_after_five_wrong_passwords_even_for_the_right_one(api: Api) -> None:
    assert [_login(api, "operator", f"guess{i}").status_code for i in range(5)] == [401] * 5
    locked = _login(api, "operator", PASSWORD)
    assert locked.status_code == 429, locked.text
    assert 1 <= int(locked.headers["retry-after"]) <= 60
    assert "try again in" in locked.json()["error"]["message"]
    assert _login(api, "viewer", PASSWORD).status_code == 200  # another user from the same address


def test_a_client_address_is_locked_after_guessing_across_usernames(api: Api) -> None:
    statuses = [_login(api, f"nosuch{i}", "guess").status_code for i in range(20)]
    assert statuses == [401] * 20
    refused = _login(api, "viewer", PASSWORD)
    assert refused.status_code == 429 and "retry-after" in refused.headers


def _guard(clock: Callable[[], float], failures_per_user: int, failures_per_client: int = 100) -> LoginGuard:
    return LoginGuard(
        failures_per_user=failures_per_user,
        failures_per_client=failures_per_client,
        window_s=60,
        max_lockout_s=300,
        clock=clock,
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_lockout_ends_after_its_time_and_doubles_when_guessing_goes_on() -> None:
    clock = Clock()
    guard = LoginGuard(
        failures_per_user=3, failures_per_client=100, window_s=60, max_lockout_s=300, clock=clock
    )
    for _ in range(3):
        guard.check("10.0.0.1", "ada")
        guard.failed("10.0.0.1", "ada")
    with pytest.raises(TooManyRequests) as first:
        guard.check("10.0.0.2", "ada")  # the username is locked, from any address
    assert first.value.retry_after_s == 60
    clock.now += 60
    guard.check("10.0.0.1", "ada")
    for _ in range(3):
        guard.failed("10.0.0.1", "ada")
    with pytest.raises(TooManyRequests) as second:
        guard.check("10.0.0.1", "ada")
    assert second.value.retry_after_s == 120  # backs off
    clock.now += 120
    guard.check("10.0.0.1", "ada")
    guard.succeeded("10.0.0.1", "ada")  # a success forgets the user's failures and lockouts
    for _ in range(3):
        guard.failed("10.0.0.1", "ada")
    with pytest.raises(TooManyRequests) as third:
        guard.check("10.0.0.1", "ada")
    assert third.value.retry_after_s == 60


def test_failures_older_than_the_window_are_forgotten() -> None:
    clock = Clock()
    guard = LoginGuard(
        failures_per_user=3, failures_per_client=100, window_s=60, max_lockout_s=300, clock=clock
    )
    for _ in range(10):
        guard.failed("10.0.0.1", "ada")
        clock.now += 30  # never 3 within a minute
        guard.check("10.0.0.1", "ada")


def test_the_guard_forgets_idle_entries_so_sprayed_usernames_do_not_grow_it() -> None:
    clock = Clock()
    guard = LoginGuard(
        failures_per_user=5, failures_per_client=10**9, window_s=60, max_lockout_s=300, clock=clock
    )
    for i in range(20_000):
        guard.failed("10.0.0.1", f"user{i}")
        clock.now += 0.1
    assert guard.tracked() <= 10_001


def test_concurrent_password_checks_beyond_the_limit_get_429(
    app_factory: Callable[..., FastAPI], session_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.backend.conftest import add_user

    add_user(session_factory, "ada", "viewer")
    entered, release = threading.Event(), threading.Event()
    real = security.verify_password

    def held(password_hash: str | None, password: str) -> bool:
        if password == "held":
            entered.set()
            assert release.wait(60)
        return real(password_hash, password)

    monkeypatch.setattr(security, "verify_password", held)
    with SyncClient(app_factory(RecordingDispatcher(), login_max_concurrent=1)) as client:
        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(client.post, "/api/auth/login", json={"username": "ada", "password": "held"})
            try:
                assert entered.wait(60)
                busy = client.post("/api/auth/login", json={"username": "ada", "password": PASSWORD})
            finally:
                release.set()
            assert slow.result().status_code == 401
        assert busy.status_code == 429 and busy.headers["retry-after"] == "1", busy.text
        assert (
            client.post("/api/auth/login", json={"username": "ada", "password": PASSWORD}).status_code == 200
        )


@pytest.mark.parametrize("username", ["nosuchuser", "deactivated"])
def test_an_unknown_or_deactivated_user_costs_a_password_check(
    api: Api, monkeypatch: pytest.MonkeyPatch, username: str
) -> None:
    """The answer's timing must not tell which usernames exist: the password is checked against a
    stand-in hash when there is no user (or no password) to check it against."""
    admin = api.as_("admin")
    created = api.client.post(
        "/api/users", json={"username": "deactivated", "password": "long enough pw"}, headers=admin
    ).json()
    api.client.post(f"/api/users/{created['id']}/deactivate", headers=admin)
    checked: list[str] = []

    class CountingHasher(PasswordHasher):
        def verify(self, hash: str | bytes, password: str | bytes) -> Literal[True]:
            checked.append(str(hash))
            return super().verify(hash, password)

    monkeypatch.setattr(security, "_hasher", CountingHasher(time_cost=1, memory_cost=1024, parallelism=1))
    assert _login(api, username, "some guess").status_code == 401
    assert len(checked) == 1 and checked[0].startswith("$argon2")
