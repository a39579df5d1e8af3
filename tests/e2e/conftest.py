"""Browser tests of the dashboard: the real service in both deployments (``embedded``: ``collapipe
serve`` on SQLite with the local executor; ``production``: PostgreSQL, Redis and a Celery worker, see
server.py) and Debian's Chromium driven by Playwright (no browser download).

Every test that uses ``server`` runs once per deployment (ids ``[embedded]``/``[production]``; the
production ones are marked postgres, redis and celery), or on those a
``@pytest.mark.deployments(...)`` marker names. One server runs at a time: pytest finishes every
test of one deployment before starting the other's server. Every test's page refuses to talk to
anything but the server: a request to another host fails the test. Screenshots go to
test-artifacts/e2e/<deployment>/.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Request, expect, sync_playwright

from tests.deployment_params import deployment_params
from tests.e2e.configs import tiny
from tests.e2e.server import PASSWORDS, USERNAMES, Server, running_server

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]  # fmt: skip
ARTIFACT_ROOT = Path(__file__).resolve().parents[2] / "test-artifacts" / "e2e"


class DeploymentArtifacts:
    """test-artifacts/e2e/<deployment of the running server>/: ``ARTIFACTS / "name.png"`` is a Path."""

    deployment = "embedded"  # set by the server fixture (one server runs at a time)

    @property
    def path(self) -> Path:
        return ARTIFACT_ROOT / self.deployment

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        self.path.mkdir(parents=parents, exist_ok=exist_ok)


ARTIFACTS = DeploymentArtifacts()
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
LOCAL_SCHEMES = {"data", "blob", "about"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise ``server`` over both deployments, or those a ``deployments`` marker names."""
    if "server" in metafunc.fixturenames:
        metafunc.parametrize("server", deployment_params(metafunc), indirect=True, scope="session")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Server]:
    """The service of one deployment, shared by that deployment's tests; screenshots go to its folder."""
    deployment: str = request.param
    root = tmp_path_factory.mktemp(f"e2e-{deployment}")
    with running_server(root, deployment) as running:
        DeploymentArtifacts.deployment = deployment
        yield running


@dataclass(frozen=True)
class FinishedRuns:
    baseline: int  # uniform policy, M = 4 micro-batches
    other: int  # uniform policy, M = 2


@pytest.fixture(scope="session")
def finished_runs(server: Server) -> FinishedRuns:
    """Two short analytic runs, finished, shared by the tests that only read runs."""
    baseline = server.launch(tiny(rounds=8, executor="analytic"), name="uniform M=4")
    other = server.launch(tiny(rounds=8, executor="analytic", num_microbatches=2), name="uniform M=2")
    for run_id in (baseline, other):
        server.wait_for_run(run_id, ("succeeded",))
    return FinishedRuns(baseline, other)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail("Debian's chromium is missing: `make browser` (apt-get install chromium) installs it")
    with sync_playwright() as playwright:
        # launch() starts Chromium with a fresh temporary user-data-dir of its own
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS, headless=True
        )
        yield chromium
        chromium.close()


def screenshot(page: Page, name: str) -> Path:
    """Save a full-page screenshot under test-artifacts/e2e/<deployment>/ and return its path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


class RequestGuard:
    """Records every request of a browser context; ``outside`` lists those to another host."""

    def __init__(self, context: BrowserContext) -> None:
        self.urls: list[str] = []
        context.on("request", lambda request: self.urls.append(request.url))

    def outside(self) -> list[str]:
        return [
            url
            for url in self.urls
            if urlparse(url).scheme not in LOCAL_SCHEMES and urlparse(url).hostname not in LOCAL_HOSTS
        ]


def counted_api_requests(page: Page) -> list[str]:
    """The URLs of the API requests ``page`` sends from now on (a list that fills in), but its event
    streams and /api/auth/me (who is signed in)."""
    urls: list[str] = []

    def record(request: Request) -> None:
        path = urlparse(request.url).path
        if path.startswith("/api/") and not path.endswith("/events") and path != "/api/auth/me":
            urls.append(request.url)

    page.on("request", record)
    return urls


Login = Callable[..., Page]


@pytest.fixture
def login(browser: Browser, server: Server, request: pytest.FixtureRequest) -> Iterator[Login]:
    """login(role) -> a page signed in as the test user of that role, in a fresh browser context."""
    contexts: list[tuple[BrowserContext, RequestGuard, list[Page]]] = []

    def open_as(
        role: str,
        width: int = 1280,
        height: int = 900,
        username: str | None = None,
        password: str | None = None,
    ) -> Page:
        """Sign in as the test user of ``role``, or as ``username``/``password`` who has that role."""
        context = browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True)
        guard = RequestGuard(context)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.errors = errors  # type: ignore[attr-defined]
        contexts.append((context, guard, [page]))
        page.goto(f"{server.url}/")
        page.get_by_label("Username").fill(username or USERNAMES[role])
        page.get_by_label("Password").fill(password or PASSWORDS[role])
        page.get_by_role("button", name="Log in").click()
        expect(page.locator("#user-role")).to_have_text(role)
        return page

    yield open_as
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.originalname)  # the folder names the deployment
    for i, (context, guard, pages) in enumerate(contexts):
        for page in pages:
            if not page.is_closed():
                screenshot(page, f"{name}-end{'' if i == 0 else f'-{i}'}")
            assert not getattr(page, "errors", []), f"uncaught errors in the page: {page.errors}"  # type: ignore[attr-defined]
        outside = guard.outside()
        context.close()
        assert not outside, f"the page sent requests to other hosts: {outside}"
