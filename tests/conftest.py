"""Shared fixtures: one behaviour suite, run against both storage adapters.

`database_url` is parametrized over SQLite (a temp file) and PostgreSQL (a
fresh schema per test in database `test`), each already migrated unless the
test is marked `unmigrated` (tests/support/fresh_databases.py says how, and
why). When PostgreSQL cannot be reached
the postgres variants are skipped locally and *fail* in CI (`CI=true`), so a
broken CI database never turns into a green run that tested nothing.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

import tidegate
from tests.support.fresh_databases import MigratedSQLite, PostgresSchemas, schema_url
from tidegate import App, RunStatus, Worker
from tidegate.domain.clock import SYSTEM_CLOCK, Clock, ShiftedClock

REPO_ROOT = Path(__file__).resolve().parent.parent
POSTGRES_ADMIN_URL = os.environ.get("TIDEGATE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", "postgres"]


# --- databases -------------------------------------------------------------------------------


def _postgres_unavailable(reason: str) -> None:
    message = f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL}: {reason}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message + " (CI=true: postgres tests must run in CI, not be skipped)", pytrace=False)
    pytest.skip(message)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "unmigrated: the test's database starts empty (it migrates, or checks an unmigrated one, itself)"
    )


# --- running on several processes (pytest-xdist) -------------------------------------------------

# `pytest -n 2 --dist loadgroup` (scripts/test.sh's default) runs the suite on two pytest-xdist
# processes; a test is sent to either, except the tests of one group, which all go to one process,
# in turn. Each process has its own session: its own migrated SQLite file and its own PostgreSQL
# schemas (random names in the one `test` database, each test its own schema and LISTEN channel).
SERIAL = ("tests/process/",)  # proofs by many processes and timed deadlines: never two at once
PER_MODULE = ("tests/browser/", "tests/docs/test_site.py")  # a module's fixtures are set up once


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the tests that must share a process (no effect without `--dist loadgroup`). xdist
    sends the largest group first: the serial lane, the longest, starts while the other process
    takes the rest."""
    for item in items:
        path = Path(str(item.path)).relative_to(REPO_ROOT).as_posix()
        if path.startswith(SERIAL):
            item.add_marker(pytest.mark.xdist_group("serial"))
        elif path.startswith(PER_MODULE):
            item.add_marker(pytest.mark.xdist_group(path))


def _migrated(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker("unmigrated") is None


@pytest.fixture(scope="session")
def postgres_schemas() -> Iterator[PostgresSchemas]:
    """The session's maker of test schemas (tests/support/fresh_databases.py)."""
    schemas = PostgresSchemas(POSTGRES_ADMIN_URL)
    try:
        yield schemas
    finally:
        schemas.close()


@pytest.fixture
def postgres_url(request: pytest.FixtureRequest, postgres_schemas: PostgresSchemas) -> Iterator[str]:
    """A fresh schema in the `test` database, selected through search_path, dropped after the test;
    migrated unless the test is marked `unmigrated`."""
    try:
        import psycopg
    except ImportError as error:  # pragma: no cover - psycopg is a dependency
        _postgres_unavailable(f"psycopg is not importable ({error})")
        raise
    try:
        schema = postgres_schemas.migrated() if _migrated(request) else postgres_schemas.bare()
    except psycopg.OperationalError as error:
        _postgres_unavailable(str(error).strip())
        raise
    try:
        yield schema_url(POSTGRES_ADMIN_URL, schema)
    finally:
        postgres_schemas.drop_later(schema, request.node.nodeid)


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> MigratedSQLite:
    return MigratedSQLite(tmp_path_factory.mktemp("migrated-sqlite"))


@pytest.fixture
def sqlite_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A file of the test's own folder: a copy of a migrated one unless the test is marked `unmigrated`."""
    if _migrated(request):
        request.getfixturevalue("migrated_sqlite").copy_to(tmp_path / "t.db")
    return f"sqlite:///{tmp_path}/t.db"


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest) -> str:
    """The same behaviour suite against each adapter."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_url")
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def tidegate_database(database_url: str) -> str:
    """The plugin's own database fixture (tidegate.testing), here on both adapters, as every behaviour is."""
    return database_url


@pytest.fixture
def backend(database_url: str) -> str:
    return "sqlite" if database_url.startswith("sqlite") else "postgres"


def execute_sql(database_url: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement directly on the database (behind tidegate's back), committed.

    Use `?` placeholders; they are translated for psycopg.
    """
    if database_url.startswith("sqlite"):
        connection = sqlite3.connect(database_url[len("sqlite:///") :], timeout=30)
        try:
            cursor = connection.execute(statement, params)
            rows = cursor.fetchall()
            connection.commit()
            return rows
        finally:
            connection.close()
    import psycopg

    from tidegate.storage.postgres.pooler import endpoint

    with psycopg.connect(endpoint(database_url).url, autocommit=True) as connection:  # a pooled URL's too
        cursor = connection.execute(statement.replace("?", "%s"), params)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []


# --- apps and in-thread workers -----------------------------------------------------------------


@pytest.fixture
def clock() -> ShiftedClock:
    """The time of the test's app and stores: `clock.advance(lease)` instead of sleeping out a lease."""
    return ShiftedClock()


@pytest.fixture
def app(database_url: str, clock: ShiftedClock) -> Iterator[App]:
    application = App(database_url, clock=clock)
    try:
        yield application
    finally:
        application.close()


StartWorker = Callable[..., Worker]


@pytest.fixture
def start_worker(app: App) -> Iterator[StartWorker]:
    """Start an in-thread worker (`app.worker(...).start()`); every one is stopped at teardown."""
    workers: list[Worker] = []

    def start(application: App | None = None, **options: Any) -> Worker:
        worker = (application or app).worker(**options).start()
        workers.append(worker)
        assert not worker.join(0), "the worker stopped as it started (its error is logged)"
        return worker

    yield start
    for worker in workers:
        worker.stop(timeout=30, grace=0)
    for worker in workers:
        assert worker.join(30), "a worker did not stop within 30s"


# --- worker processes -----------------------------------------------------------------------------


class WorkerProcesses:
    """Worker processes running `tests/apps/run_worker.py`; all killed (by pid) at teardown."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.processes: list[subprocess.Popen[bytes]] = []

    def spawn(
        self,
        target: str,
        database_url: str,
        *,
        max_workers: int = 4,
        drain: bool = False,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        environment = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
            "TIDEGATE_DATABASE": database_url,
            **(env or {}),
        }
        command = [sys.executable, "-m", "tests.apps.run_worker", target, "--max-workers", str(max_workers)]
        if drain:
            command.append("--drain")
        index = len(self.processes)
        log = open(self.folder / f"worker-{index}.log", "wb")  # noqa: SIM115 - closed with the process
        try:
            process = subprocess.Popen(command, cwd=REPO_ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        self.processes.append(process)
        return process

    def wait_drained(self, processes: list[subprocess.Popen[bytes]], timeout: float) -> None:
        """Wait for each draining worker to exit by itself, failing with its log if it hangs or fails."""
        for process in processes:
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pytest.fail("a draining worker did not finish:\n" + self.output(process))
            assert process.returncode == 0, self.output(process)

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def output(self, process: subprocess.Popen[bytes]) -> str:
        index = self.processes.index(process)
        return (self.folder / f"worker-{index}.log").read_text(errors="replace")

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
        for process in self.processes:
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=30)


@pytest.fixture
def worker_processes(tmp_path: Path) -> Iterator[WorkerProcesses]:
    folder = tmp_path / "workers"
    folder.mkdir()
    processes = WorkerProcesses(folder)
    try:
        yield processes
    finally:
        processes.close()


# --- waiting (no timing assertions: generous deadlines that only catch hangs) ----------------------


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.02, message: str = "") -> Any:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {message or predicate}")
        time.sleep(interval)


def wait_status(app: App, run_id: str, status: RunStatus, timeout: float = 30.0) -> tidegate.RunHandle:
    handle = app.run(run_id)
    wait_until(lambda: handle.status() is status, timeout, message=f"run {run_id} to be {status.value}")
    return handle


def event_types(app: App, run_id: str) -> list[str]:
    return [event.type for event in app.store.run_events(run_id)]


def raw_store(database_url: str, clock: Clock = SYSTEM_CLOCK) -> Any:
    """The adapter for `database_url`, opened without migrating or checking (as tests need)."""
    from tidegate.storage.urls import parse_database_url

    parsed = parse_database_url(database_url)
    if parsed.kind == "sqlite":
        from tidegate.storage.sqlite import SQLiteStore

        assert parsed.path is not None
        return SQLiteStore(database_url, parsed.path, clock=clock)
    from tidegate.storage.postgres import PostgresStore

    return PostgresStore(database_url, clock=clock)


def read_execution_log(path: Path) -> list[tuple[str, str, int]]:
    """Lines `start|end <run id> <attempt>` written by tests.apps.counted, parsed."""
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        kind, run_id, attempt = line.split()
        entries.append((kind, run_id, int(attempt)))
    return entries
