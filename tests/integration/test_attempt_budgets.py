"""Attempt budgets at every door (issue 23 items 6 and 7), on both backends.

`max_attempts` is refused past `MAX_ATTEMPTS` where it is declared, as every
other limit is, so no submit can later fail on PostgreSQL's 32-bit column.
The largest budget allowed works through the paths that grow it (a wait on a
child, a hand-back), and so does one at the column's very end, written behind
tidegate's back as a store from before the bound could hold: the growth
saturates, and `tidegate sweep` recovers such a run in one readable line.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import execute_sql, wait_status, wait_until
from tidegate import App, Context, RunStatus
from tidegate.cli.main import app as cli
from tidegate.domain.errors import ConfigurationError, InvalidArgument
from tidegate.domain.integers import MAX_ATTEMPTS, STORED_INT_MAX
from tidegate.domain.model import CycleRequest, WorkerRegistration

BUDGETS = [pytest.param(MAX_ATTEMPTS, id="largest-declared"), pytest.param(STORED_INT_MAX, id="column-end-stored")]


def _budget(database_url: str, run_id: str, budget: int) -> None:
    """Give a queued run `budget`: declared already when it is the largest allowed, else written directly."""
    if budget != MAX_ATTEMPTS:
        execute_sql(database_url, "UPDATE tidegate_runs SET max_attempts = ? WHERE id = ?", (budget, run_id))


@pytest.mark.parametrize("value", [MAX_ATTEMPTS + 1, STORED_INT_MAX, 2**31, 2**63, 0, True, 2.0])
def test_a_budget_out_of_range_is_refused_where_it_is_declared(app: App, value: Any) -> None:
    expected = f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS}, got {value!r}"
    with pytest.raises(InvalidArgument) as task:
        app.task(name="t.many", max_attempts=value)(lambda: None)
    assert str(task.value) == expected
    with pytest.raises(InvalidArgument) as workflow:
        app.workflow(name="w.many", max_attempts=value)(lambda wf: None)
    assert str(workflow.value) == expected
    assert app.store.list_tasks() == []  # nothing declared


def test_a_worker_capacity_past_the_column_is_refused(app: App) -> None:
    app.task(name="t.one")(lambda: None)
    with pytest.raises(ConfigurationError, match=f"max_workers must be an integer from 1 to {STORED_INT_MAX}"):
        app.worker(max_workers=2**31)


@pytest.mark.parametrize("budget", BUDGETS)
def test_trigger_and_wait_with_the_largest_budget(app: App, database_url: str, start_worker, budget: int) -> None:
    @app.task(name="t.child", queue="children")
    def child(n: int) -> int:
        return n * 2

    @app.task(name="t.parent", max_attempts=MAX_ATTEMPTS)
    def parent(ctx: Context) -> int:
        return ctx.trigger_and_wait(child, n=21)

    handle = parent.submit()
    _budget(database_url, handle.id, budget)
    start_worker(queues=["default", "children"])
    assert handle.wait(timeout=30) == 42
    assert handle.info().max_attempts == min(budget + 1, STORED_INT_MAX)  # the wait did not count


@pytest.mark.parametrize("budget", BUDGETS)
def test_a_graceful_hand_back_with_the_largest_budget(app: App, database_url: str, start_worker, budget: int) -> None:
    started = threading.Event()

    @app.task(name="t.long", max_attempts=MAX_ATTEMPTS)
    def long(ctx: Context) -> int:
        if ctx.attempt == 1:
            started.set()
            ctx.wait_cancelled_sync(60)
        return ctx.attempt

    handle = long.submit()
    _budget(database_url, handle.id, budget)
    worker = start_worker()
    assert started.wait(30)
    wait_status(app, handle.id, RunStatus.RUNNING)
    worker.stop(timeout=30, grace=0.1)  # what SIGTERM does
    record = handle.info()
    assert record.status is RunStatus.QUEUED and record.max_attempts == min(budget + 1, STORED_INT_MAX)
    start_worker()
    assert handle.wait(timeout=30) == 2


def test_cli_sweep_recovers_a_run_at_the_column_end_beside_another(app: App, database_url: str) -> None:
    """Two runs of a worker that died having started neither: neither rescue is charged, both grow."""
    worker, lease = "host-a:4242:gone", 0.3
    job = app.task(name="t.crunch", max_attempts=3)(lambda: None)
    edge, other = job.submit().id, job.submit().id
    _budget(database_url, edge, STORED_INT_MAX)
    app.store.register_worker(WorkerRegistration(worker, 2, ["default"], False, lease))
    assert len(app.store.cycle(CycleRequest(worker, ["default"], [], [], 2, lease)).claimed) == 2
    expiry = app.store.get_run(edge).lease_expires_at  # type: ignore[union-attr]
    wait_until(lambda: datetime.now(UTC) > expiry, message="the lease to expire")

    swept = CliRunner().invoke(cli, ["sweep", "--database", database_url], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert swept.exit_code == 0 and swept.exception is None, swept.output
    assert swept.stdout.strip() == f"re-queued 2 run(s): {', '.join(sorted([edge, other]))}"
    assert app.store.get_run(edge).max_attempts == STORED_INT_MAX  # type: ignore[union-attr]
    assert app.store.get_run(other).max_attempts == 4  # type: ignore[union-attr]
