"""`App.set_pool_limit` and `tidegate pools list|info|set`: validation, tables, one-line errors.

SQLite only for the rendering (what the CLI prints); the validation runs on both adapters.
"""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from tidegate import App, InvalidArgument
from tidegate.cli.main import app as cli
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.model import CycleRequest
from tidegate.domain.pools import pool_needs
from tidegate.domain.steps import SlotRequest

QUEUE = "etl"
# A time cell (cli/render.short_time): the clock time today, the date and time when it falls on
# another day, as a lease taken at 23:58 expires after midnight.
TIME_CELL = r"\d\d:\d\d:\d\d|[A-Z][a-z]{2} \d\d \d\d:\d\d"


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def one_error_line(result) -> str:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("pool", "limit", "lease", "error"),
    [
        ("db", -1, "5m", "pool limit must be an integer from 0 to 2147483647, got -1"),
        ("db", 2.5, "5m", "pool limit must be an integer from 0 to 2147483647"),
        ("db", True, "5m", "pool limit must be an integer from 0 to 2147483647"),
        ("db", "3", "5m", "pool limit must be an integer from 0 to 2147483647"),
        ("bad name", 1, "5m", "pool name 'bad name' is not valid"),
        ("", 1, "5m", "pool name '' is not valid"),
        ("db", 1, "soon", "cannot read 'soon' as a duration"),
        ("db", 1, "10ms", "lease_duration must be at least 300ms"),
        ("db", 1, None, "lease_duration must be a duration like '5m'"),
    ],
)
def test_set_pool_limit_refuses_bad_input_and_changes_nothing(app, pool, limit, lease, error):
    app.set_pool_limit("db", 3, lease_duration="1m")
    with pytest.raises((InvalidArgument, ConfigurationError), match=re.escape(error)):
        app.set_pool_limit(pool, limit, lease_duration=lease)
    [status] = app.store.pools()
    assert (status.name, status.limit, status.lease_seconds) == ("db", 3, 60)


def test_set_pool_limit_upserts(app):
    config = app.set_pool_limit("db", 5)
    assert (config.limit, config.lease_seconds) == (5, 300)
    app.set_pool_limit("db", 0, lease_duration="1h30m")
    [status] = app.store.pools()
    assert (status.limit, status.lease_seconds) == (0, 5400)


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path}/cli.db"


@pytest.fixture
def busy(url):
    """A pool 'database' of limit 5 with 4 slots held by two steps and one step waiting; an unconfigured pool."""
    app = App(url)

    @app.task(name="t.wf", queue=QUEUE)
    def wf() -> None:
        return None

    app.set_pool_limit("database", 5, lease_duration="5m")
    for _ in range(3):
        wf.submit()
    store = app.store
    runs = store.cycle(CycleRequest("w1", [QUEUE], [], [], 3, 60)).claimed
    first, second, third = (run.fence for run in runs)
    assert store.acquire_slots(first, "w1", SlotRequest("heavy_query[3]", pool_needs({"database": 2}), {})).granted
    assert store.acquire_slots(second, "w1", SlotRequest("heavy_query[4]", pool_needs({"database": 2}), {})).granted
    assert not store.acquire_slots(third, "w1", SlotRequest("publish", pool_needs({"database": 2}), {})).granted
    assert store.acquire_slots(third, "w1", SlotRequest("export", pool_needs({"warehouse_api": 1}), {})).granted
    yield app, [run.id for run in runs]
    app.close()


def test_pools_list_shows_limits_usage_pending_and_unconfigured_pools(busy, url):
    result = invoke("pools", "list", "--database", url)
    assert result.exit_code == 0, result.output
    lines = [line.rstrip() for line in result.stdout.splitlines() if line.strip()]
    assert re.split(r"\s+", lines[0].strip()) == ["pool", "limit", "claimed", "pending", "lease", "source"]
    assert re.split(r"\s+", lines[2].strip()) == ["database", "5", "4/5", "1", "5m", "code"]
    assert re.split(r"\s+", lines[3].strip()) == ["warehouse_api", "unconfigured", "1", "0", "-", "-"]
    assert "unconfigured pools are unlimited" in lines[4]
    # aligned: every value ends in the column its header ends in (right-justified)
    assert lines[0].index("claimed") + len("claimed") == lines[2].index("4/5") + len("4/5")


def test_pools_info_shows_the_header_every_holder_and_every_waiting_step(busy, url):
    _, run_ids = busy
    result = invoke("pools", "info", "database", "--database", url)
    assert result.exit_code == 0, result.output
    lines = [line.rstrip() for line in result.stdout.splitlines() if line.strip()]
    assert lines[0] == "Pool: database   limit 5   lease 5m   claimed 4/5   pending 1"
    assert re.split(r"\s{2,}", lines[1].strip()) == ["RUN", "STEP", "SLOTS", "CLAIMED", "LEASE EXPIRES"]
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines[3:5]]
    assert [(row[0], row[1], row[2]) for row in rows] == [
        (run_ids[0], "heavy_query[3]", "2"),
        (run_ids[1], "heavy_query[4]", "2"),
    ]
    assert all(len(row) == 5 and all(re.fullmatch(TIME_CELL, cell) for cell in row[3:]) for row in rows)
    assert lines[5].strip() == "waiting for slots"
    assert re.split(r"\s{2,}", lines[6].strip()) == ["RUN", "STEP", "SLOTS", "WAITING SINCE"]
    [waiting] = [re.split(r"\s{2,}", line.strip()) for line in lines[8:]]
    assert waiting[:3] == [run_ids[2], "publish", "2"] and re.fullmatch(TIME_CELL, waiting[3])


def test_pools_set_and_its_one_line_errors(busy, url):
    result = invoke("pools", "set", "database", "7", "--lease-duration", "30s", "--database", url)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        "pool database: limit 7 (was 5), lease 30s  (a live override: kept until 'tidegate pools reset')"
    )
    assert "LIMIT 'many' is not valid" in one_error_line(invoke("pools", "set", "database", "many", "--database", url))
    assert "pool name 'a b' is not valid" in one_error_line(invoke("pools", "set", "a b", "1", "--database", url))
    assert "cannot read 'soon'" in one_error_line(
        invoke("pools", "set", "database", "1", "--lease-duration", "soon", "--database", url)
    )
    assert "no pool named 'nope' (pools: database, warehouse_api)" in one_error_line(
        invoke("pools", "info", "nope", "--database", url)
    )
    result = invoke("pools", "list", "--database", url)
    assert re.split(r"\s+", result.stdout.splitlines()[2].strip()) == [
        "database", "7", "4/7", "1", "30s", "override", "(code:", "5)"
    ]  # fmt: skip


def test_a_live_pool_limit_is_not_undone_by_the_code_running_again(database_url):
    """Issue 15 item 2: `pools set` is an override that persists and wins over `App.set_pool_limit`
    (run again by every import or worker restart) until `pools reset`, and each change is audited."""
    with App(database_url) as first:
        first.set_pool_limit("database", 2)
    result = invoke("pools", "set", "database", "3", "--database", database_url)
    assert result.exit_code == 0, result.output
    with App(database_url) as again:  # `python -c "from tasks import add"` or a worker restart
        config = again.set_pool_limit("database", 2)
        assert (config.limit, config.source) == (3, "override")
    listed = invoke("pools", "list", "--database", database_url)
    assert re.split(r"\s+", listed.stdout.splitlines()[2].strip())[:2] == ["database", "3"]
    assert "override (code: 2)" in listed.stdout
    reset = invoke("pools", "reset", "database", "--database", database_url)
    assert reset.stdout.strip() == "pool database: limit 2 from the code, lease 5m"
    with App(database_url) as app:
        changes = [event.metadata for event in app.store.events_after(0, 100) if event.type == "LimitChanged"]
        assert [(change["new"], change["source"], change["reset"]) for change in changes] == [
            (2, "code", False),
            (3, "override", False),
            (2, "code", True),
        ]


def test_pools_set_of_an_unknown_pool_asks_for_create(database_url):
    """Issue 15 item 10: a typo does not silently create a pool."""
    with App(database_url) as app:
        app.set_pool_limit("database", 2)
    error = one_error_line(invoke("pools", "set", "typo_pool", "4", "--database", database_url))
    assert "no pool named 'typo_pool' (pools: database); to create it, add --create" in error
    with App(database_url) as app:
        assert [pool.name for pool in app.store.pools()] == ["database"]
    created = invoke("pools", "set", "typo_pool", "4", "--create", "--database", database_url)
    assert created.exit_code == 0, created.output


def test_an_unconfigured_pool_stays_listed_and_has_info_after_its_steps(busy, url):
    """Issue 15 item 8: once a step asked for it, an unconfigured pool is listed and `pools info` shows it."""
    app, run_ids = busy
    app.store.release_slots((run_ids[2], 1), "export")  # nothing holds or waits for warehouse_api now
    listed = invoke("pools", "list", "--database", url)
    assert "warehouse_api" in listed.stdout
    info = invoke("pools", "info", "warehouse_api", "--database", url)
    assert info.exit_code == 0, info.output
    assert info.stdout.splitlines()[0].startswith("Pool: warehouse_api   limit unconfigured")


def test_pools_list_and_info_print_json(busy, url):
    listed = json.loads(invoke("pools", "list", "--json", "--database", url).stdout)
    assert {pool["name"]: (pool["limit"], pool["source"]) for pool in listed["pools"]} == {
        "database": (5, "code"),
        "warehouse_api": (None, None),
    }
    info = json.loads(invoke("pools", "info", "database", "--json", "--database", url).stdout)
    assert [holder["step_key"] for holder in info["holders"]] == ["heavy_query[3]", "heavy_query[4]"]
