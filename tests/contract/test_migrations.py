"""Versioned migrations: applied once, idempotent, serialized, and a mismatched schema is refused."""

import contextlib
import sqlite3
import threading

import pytest

from tidegate import App, SchemaError
from tidegate.bootstrap import open_store
from tidegate.storage.shared.migrations import load_migrations

from .conftest import execute_sql, raw_store

# each test starts from an empty database: what it proves is how one gets migrated
pytestmark = pytest.mark.unmigrated


def test_a_fresh_database_migrates_and_rerunning_is_a_no_op(database_url):
    store = raw_store(database_url)
    try:
        assert store.schema_version() == 0
        with pytest.raises(SchemaError, match="tidegate db migrate"):
            store.check_schema()
        applied = store.migrate()
        assert applied and applied[0] == 1 and applied == sorted(set(applied))  # in order; gaps are allowed
        assert store.migrate() == []
    finally:
        store.close()
    store = open_store(database_url)  # migrates (nothing left to do)
    try:
        version = store.schema_version()
        assert version == applied[-1]
        store.check_schema()  # current: no error
        assert store.migrate() == []
        assert store.schema_version() == version
        rows = execute_sql(database_url, "SELECT version FROM tidegate_schema_version ORDER BY version")
        assert [row[0] for row in rows] == applied
    finally:
        store.close()
    # opening again (a second process, a restart) applies nothing and keeps the data
    with App(database_url) as app:

        @app.task(name="t.keep")
        def keep() -> int:
            return 1

        handle = keep.submit()
        assert app.store.migrate() == []
    with App(database_url) as again:
        assert again.run(handle.id).info().task == "t.keep"


def test_an_unmigrated_database_is_refused_when_migration_is_not_allowed(database_url):
    app = App(database_url, migrate=False)
    try:
        with pytest.raises(SchemaError, match="tidegate db migrate"):
            app.store  # noqa: B018 - first use opens the store
        with pytest.raises(SchemaError, match="tidegate db migrate"):
            open_store(database_url, migrate=False)
    finally:
        app.close()
    # refusing migrated nothing behind the user's back: every migration is still pending
    store = raw_store(database_url)
    try:
        assert store.schema_version() == 0
        applied = store.migrate()
        assert applied and applied == sorted(applied) and applied[0] == 1
        store.check_schema()
    finally:
        store.close()
    with App(database_url, migrate=False) as app:
        assert app.store.schema_version() == applied[-1]


def test_a_newer_schema_is_refused(database_url):
    store = open_store(database_url)
    store.close()
    execute_sql(
        database_url,
        "INSERT INTO tidegate_schema_version (version, name, applied_at) "
        "SELECT 999, 'from_the_future', applied_at FROM tidegate_schema_version ORDER BY version LIMIT 1",
    )
    with pytest.raises(SchemaError, match="999"):
        open_store(database_url)
    with pytest.raises(SchemaError, match="999"):
        open_store(database_url, migrate=False)
    with pytest.raises(SchemaError, match="upgrade tidegate"):
        App(database_url).store  # noqa: B018
    with pytest.raises(SchemaError):
        App(database_url, migrate=False).store  # noqa: B018
    # refusing changed nothing: the future version is still recorded
    rows = execute_sql(database_url, "SELECT max(version) FROM tidegate_schema_version")
    assert rows[0][0] == 999


def test_a_version_below_the_highest_applied_is_still_applied(database_url):
    """Branches number their files apart: a database that took a higher version first (the other
    branch landed later) still gets the lower one, and is refused as unmigrated until it has.
    Here 17 (the tasks' `unique_rule`) is taken out of a database that has 18."""
    open_store(database_url).close()
    execute_sql(database_url, "ALTER TABLE tidegate_tasks DROP COLUMN unique_rule")
    execute_sql(database_url, "DELETE FROM tidegate_schema_version WHERE version = 17")
    with pytest.raises(SchemaError, match="missing 17"):
        open_store(database_url, migrate=False)
    store = raw_store(database_url)
    try:
        assert store.migrate() == [17]  # only the missing one, though 18 is recorded
        store.check_schema()
        assert store.migrate() == []
    finally:
        store.close()
    assert execute_sql(database_url, "SELECT count(unique_rule) FROM tidegate_tasks") == [(0,)]


def test_concurrent_migrations_apply_each_version_once(database_url):
    # open (and close) once first, so this test is about migrations racing, not first opens
    # racing (that is test_many_stores_opening_a_fresh_sqlite_file_at_once_all_succeed)
    first = raw_store(database_url)
    assert first.schema_version() == 0
    first.close()
    results: list[list[int]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def migrate():
        try:
            store = raw_store(database_url)
            try:
                barrier.wait(10)
                results.append(store.migrate())
            finally:
                store.close()
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=migrate) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    applied = [versions for versions in results if versions]
    assert len(results) == 4
    assert len(applied) == 1, results
    rows = execute_sql(database_url, "SELECT version, count(*) FROM tidegate_schema_version GROUP BY version")
    assert all(count == 1 for _, count in rows)
    assert sorted(version for version, _ in rows) == applied[0]


def test_many_stores_opening_a_fresh_sqlite_file_at_once_all_succeed(tmp_path):
    """Several workers started together on a new embedded database (e.g. a fleet on first run).

    Every open must wait for the others (busy_timeout), never fail with 'database is locked'.
    The race is short, so it is repeated on many fresh files.
    """
    failures: list[str] = []
    for round_ in range(100):
        url = f"sqlite:///{tmp_path}/fresh-{round_}.db"
        barrier = threading.Barrier(8)
        stores = []
        lock = threading.Lock()

        def open_one(url=url, barrier=barrier, stores=stores, lock=lock, round_=round_):
            try:
                barrier.wait(10)
                store = open_store(url)
                with lock:
                    stores.append(store)
            except Exception as error:  # collected and reported
                with lock:
                    failures.append(f"round {round_}: {type(error).__module__}.{type(error).__name__}: {error}")

        threads = [threading.Thread(target=open_one) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        for store in stores:
            store.close()
    assert failures == []


def test_opening_a_sqlite_file_waits_for_a_writer_instead_of_failing(tmp_path):
    """Deterministic form of the race above: a connection is mid-write on a not-yet-WAL file.

    The store must wait (busy_timeout) and then switch the file to WAL, not raise
    'database is locked' at once.
    """
    path = tmp_path / "busy.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE unrelated (x)")
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO unrelated VALUES (1)")
    release = threading.Timer(0.5, lambda: other.execute("COMMIT"))
    release.start()
    try:
        store = open_store(f"sqlite:///{path}")
        try:
            assert store.schema_version() >= 1
        finally:
            store.close()
        with contextlib.closing(sqlite3.connect(path)) as fresh:  # `other` caches the mode it opened with
            assert fresh.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        release.join()
        other.close()


def test_the_dialects_number_their_migrations_alike_and_each_number_once():
    """Two files with one number would leave one of them unapplied on every database: refused."""
    sqlite = load_migrations("tidegate.storage.sqlite.migrations")
    postgres = load_migrations("tidegate.storage.postgres.migrations")
    assert [(m.version, m.name) for m in sqlite] == [(m.version, m.name) for m in postgres]
    assert len({m.version for m in sqlite}) == len(sqlite)
    assert (20, "rates") in [(m.version, m.name) for m in sqlite]


def test_a_database_migrated_without_rates_gets_them(database_url):
    """A database at main's schema before rates (every version up to 18 recorded) applies 20."""
    open_store(database_url).close()
    execute_sql(database_url, "DROP TABLE tidegate_rate_states")
    execute_sql(database_url, "ALTER TABLE tidegate_runs DROP COLUMN rate_charge")
    execute_sql(database_url, "ALTER TABLE tidegate_runs DROP COLUMN rate_key")
    execute_sql(database_url, "DELETE FROM tidegate_schema_version WHERE version = 20")
    with pytest.raises(SchemaError, match="missing 20"):
        open_store(database_url, migrate=False)
    store = raw_store(database_url)
    try:
        assert store.migrate() == [20]
        store.check_schema()
    finally:
        store.close()
    assert execute_sql(database_url, "SELECT count(*) FROM tidegate_rate_states") == [(0,)]


def test_two_migrations_with_one_number_are_refused(tmp_path, monkeypatch):
    package = tmp_path / "twin_migrations"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "0018_attempt_causes.sql").write_text("SELECT 1;")
    (package / "0018_rates.sql").write_text("SELECT 1;")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SchemaError, match="two migrations numbered 0018 in twin_migrations: attempt_causes, rates"):
        load_migrations("twin_migrations")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_sqlite_database_before_keyed_runs_keeps_its_keys_and_flags_their_runs(database_url, monkeypatch):
    """0028 rebuilds the key table as one b-tree and flags each run a key row names (a claim reads
    the flag, not an index on run_id): a database from before it keeps every key, and its keyed runs
    claim as keyed (their end looks for linked parents), its plain runs as plain."""
    from tidegate.storage.sqlite import schema

    known = schema.load_migrations("tidegate.storage.sqlite.migrations")
    monkeypatch.setattr(schema, "load_migrations", lambda _: [m for m in known if m.version < 28])
    raw_store(database_url).migrate()
    for run_id in ("keyed-run", "plain-run"):
        execute_sql(
            database_url,
            "INSERT INTO tidegate_runs (id, task, queue, status, args, max_attempts, retry_backoff,"
            " submitted_at, queued_at, scheduled_at) VALUES (?, 't', 'q', 'queued', '{}', 1, 1, 0, 0, 0)",
            (run_id,),
        )
    execute_sql(database_url, "INSERT INTO tidegate_unique_keys VALUES ('k1', 'keyed-run', '|queued|', NULL)")
    monkeypatch.undo()
    store = raw_store(database_url)
    try:
        assert store.migrate()[0] == 28  # and any migration after it
        store.check_schema()
    finally:
        store.close()
    assert execute_sql(database_url, "SELECT * FROM tidegate_unique_keys") == [("k1", "keyed-run", "|queued|", None)]
    assert execute_sql(database_url, "SELECT id, keyed FROM tidegate_runs ORDER BY id") == [
        ("keyed-run", 1),
        ("plain-run", 0),
    ]
    definition = execute_sql(database_url, "SELECT sql FROM sqlite_master WHERE name = 'tidegate_unique_keys'")
    assert "WITHOUT ROWID" in definition[0][0]
    assert execute_sql(database_url, "SELECT name FROM sqlite_master WHERE tbl_name = 'tidegate_unique_keys'") == [
        ("tidegate_unique_keys",)
    ]
