"""A live `tidegate serve` and a worker process per module and backend, and Debian's Chromium.

Playwright drives the system's `/usr/bin/chromium` (scripts/setup.sh installs
Debian's package when missing; a browser is never downloaded). The server runs
with both tokens, so a test signs in as an operator (full) or a viewer (read).
Screenshots go to tests/browser/screenshots/ (ignored by git).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.apps.dashboard_tasks import GPU_SLOTS, make_app
from tests.conftest import POSTGRES_ADMIN_URL, REPO_ROOT, wait_until
from tidegate import App

playwright_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
# The closed network refuses Chromium's own background connections: keep it from trying.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
APP = "tests.apps.dashboard_tasks:app"
FULL_TOKEN = "full-" + uuid.uuid4().hex
READ_TOKEN = "read-" + uuid.uuid4().hex
SHOTS = Path(__file__).parent / "screenshots"


def _unavailable(message: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message + " (CI=true: the browser tests must run in CI)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium for one module: Playwright's sync API keeps its event loop marked running on this
    thread until it stops, so it must stop before any later test calls asyncio.run()."""
    if not os.path.exists(CHROMIUM):
        _unavailable(f"{CHROMIUM} is missing: run scripts/setup.sh as root (apt-get install chromium)")
    with playwright_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield launched
        launched.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Site:
    """One served database: its URL for the browser, the test's own App over it, its gate files."""

    backend: str
    base: str
    app: App
    folder: Path
    gates: list[Path] = field(default_factory=list)

    def gate(self) -> str:
        path = self.folder / f"gate-{uuid.uuid4().hex[:8]}"
        self.gates.append(path)
        return str(path)

    def open_gate(self, gate: str) -> None:
        Path(gate).touch()

    def open_all(self) -> None:
        for gate in self.gates:
            gate.touch()


def _schema(backend: str, folder: Path) -> tuple[str, str | None]:
    if backend == "sqlite":
        return f"sqlite:///{folder}/dashboard.db", None
    try:
        import psycopg

        schema = f"b_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'CREATE SCHEMA "{schema}"')
    except Exception as error:
        _unavailable(f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL}: {error}")
        raise
    return f"{POSTGRES_ADMIN_URL}?options=-csearch_path%3D{schema}", schema


def _drop(schema: str | None) -> None:
    if schema is None:
        return
    import psycopg

    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5) as admin:
        admin.execute("SET lock_timeout = '20s'")
        admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _environment(url: str) -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("TIDEGATE_API_")}
    path = os.pathsep.join(filter(None, [str(REPO_ROOT / "src"), str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return {
        **environment, "PYTHONPATH": path, "TIDEGATE_DATABASE": url,
        "TIDEGATE_API_TOKEN": FULL_TOKEN, "TIDEGATE_API_READ_TOKEN": READ_TOKEN,
    }  # fmt: skip


def _spawn(command: list[str], url: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(command, cwd=REPO_ROOT, env=_environment(url), stdout=out, stderr=subprocess.STDOUT)


def _stop(process: subprocess.Popen[bytes], sig: int) -> None:
    if process.poll() is None:
        os.kill(process.pid, sig)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=15)
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


def _answers(url: str) -> bool:
    try:
        import urllib.request

        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """`tidegate serve` (both tokens) and one worker process over a fresh database, for the module."""
    folder = tmp_path_factory.mktemp(f"dashboard-{request.param}")
    url, schema = _schema(request.param, folder)
    app = make_app(url)
    app.set_pool_limit("gpu", GPU_SLOTS, "30s")
    app.set_pool_limit("exports", 4, "2m")  # a second pool, idle: how an unused one looks
    app.enqueue([])  # the queues and limits declared before the server reads them
    port = _free_port()
    server = _spawn(
        [sys.executable, "-m", "tidegate", "serve", APP, "--port", str(port), "--database", url],
        url,
        folder / "serve.log",
    )
    worker = _spawn(
        [sys.executable, "-m", "tests.apps.run_worker", APP, "--max-workers", "8"], url, folder / "worker.log"
    )
    base = f"http://127.0.0.1:{port}"
    served = Site(request.param, base, app, folder)
    try:
        wait_until(lambda: server.poll() is not None or _answers(f"{base}/healthz"), message="serve to answer")
        assert server.poll() is None, (folder / "serve.log").read_text()
        yield served
    finally:
        served.open_all()
        _stop(worker, signal.SIGKILL)
        _stop(server, signal.SIGTERM)
        app.close()
        _drop(schema)


class Console:
    """Every console error and uncaught page error of a browser context."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def watch(self, page: Any) -> None:
        page.on("console", lambda message: message.type == "error" and self.errors.append(message.text))
        page.on("pageerror", lambda error: self.errors.append(str(error)))


def signed_in(browser: Any, site: Site, token: str, console: Console, **options: Any) -> Any:
    """A new browser context signed in through /login with `token`; its first page."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, **options)
    page = context.new_page()
    console.watch(page)
    page.goto(f"{site.base}/queue")
    assert "/login" in page.url  # no token yet: sent to sign in, then back
    shoot(page, site, "login")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{site.base}/queue")
    return page


@pytest.fixture
def console() -> Console:
    return Console()


@pytest.fixture
def operator(browser: Any, site: Site, console: Console) -> Iterator[Any]:
    """A page signed in with the full token; the test fails if any page logged a console error."""
    page = signed_in(browser, site, FULL_TOKEN, console)
    yield page
    page.context.close()
    assert console.errors == []


def shoot(page: Any, site: Site, name: str) -> None:
    SHOTS.mkdir(exist_ok=True)
    page.locator("body").screenshot(path=str(SHOTS / f"{site.backend}-{name}.png"))  # the page, cropped to its content
