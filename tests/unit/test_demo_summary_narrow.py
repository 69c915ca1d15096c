"""The demo's summary is whole at 80 columns, as in a pipe: nothing cut off, no scope key broken (issue 15 item 7)."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

from rich.console import Console

from tidegate.demo.concurrency import ScopeTally
from tidegate.demo.summary import Summary, limits_table, tasks_table, totals_table
from tidegate.domain.model import RunRecord, RunStatus

START = datetime(2026, 11, 24, 2, 0, tzinfo=UTC)
TASKS = [("sync_customer", "external_api"), ("send_email", "emails"), ("nightly_report", "reports")]


def run(index: int, task: str, queue: str) -> RunRecord:
    started = START + timedelta(seconds=index / 10)
    return RunRecord(
        str(index), task, queue, "", RunStatus.COMPLETED, index % 3, {}, {}, None, 1 + (index % 5 == 0), 3,
        START, START, started, started + timedelta(milliseconds=50), None, None, False, None, None, None,
    )  # fmt: skip


def test_the_summary_tables_fit_80_columns_without_cutting_anything() -> None:
    runs = [run(index, *TASKS[index % 3]) for index in range(30)]
    tallies = [
        ScopeTally("queue:external_api/customer_id=1", 4, 4, 30, 12),
        ScopeTally("pool:warehouse_db", 3, 3, 9, 0),
    ]
    summary = Summary(runs, 30, 16, 2, 8, 16, tallies)
    console = Console(file=io.StringIO(), width=80, highlight=False, color_system=None)
    for table in (totals_table(summary), limits_table(summary, console.width), tasks_table(summary)):
        console.print(table)
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert "…" not in output, output
    assert "runs by status" in output and "for the" in output and "rest" in output
    assert any("queue:external_api/customer_id=1" in line for line in output.splitlines())
    assert all(len(line) <= 80 for line in output.splitlines())
