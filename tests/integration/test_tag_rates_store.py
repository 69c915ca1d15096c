"""Tag rates charged by the store: one budget per tag value across every queue, on both backends.

A tag's rate is charged by claims of any queue (so no queue's claim turn
serializes it): PostgreSQL makes its state rows exist and locks them, SQLite
has one writer. These tests claim through each adapter's own SQL.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from tests.support.racing_claims import claimed_together
from tidegate import App, RunQueueConfig, TagRateLimit
from tidegate.cli.main import app as cli
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.model import CycleRequest
from tidegate.engine.operators.why import explain

SCOPE = "rate:tag:tenant=acme"
QUEUES = ["a", "b"]


@pytest.fixture
def tag_app(database_url: str, clock: ShiftedClock) -> Iterator[App]:
    rate = TagRateLimit(key="tenant", per_unique_value=True, limit=3, per="1h", burst=3)
    app = App(database_url, clock=clock, run_queue=RunQueueConfig(tag_rate_limits=[rate]))
    for queue in QUEUES:
        app.queue(queue)
        app.task(name=f"call_{queue}", queue=queue)(lambda: None)
    try:
        yield app
    finally:
        app.close()


def _submit(app: App, queue: str, tenant: str, count: int = 1) -> list[str]:
    return [app.submit(f"call_{queue}", tags={"tenant": tenant}).id for _ in range(count)]


def _claimed(app: App, queues: list[str], limit: int = 10) -> list[str]:
    return [run.id for run in app.store.cycle(CycleRequest("w1", queues, [], [], limit, 60)).claimed]


def test_a_tenant_rate_spans_queues_and_holds_back_no_other_tenant(
    tag_app: App, clock: ShiftedClock, database_url: str
) -> None:
    acme_a = _submit(tag_app, "a", "acme", 2)
    acme_b = _submit(tag_app, "b", "acme", 2)
    globex = _submit(tag_app, "b", "globex")
    assert sorted(_claimed(tag_app, ["a"])) == sorted(acme_a)  # two of acme's three
    claimed = _claimed(tag_app, ["b"])
    assert len(set(claimed) & set(acme_b)) == 1 and globex[0] in claimed  # acme's third; globex its own
    (waiting,) = set(acme_b) - set(claimed)
    run = tag_app.store.get_run(waiting)
    assert run is not None and run.block_reason is not None
    assert [item["scope"] for item in run.block_reason] == [SCOPE]
    assert [check.scope for check in explain(tag_app.store, waiting).blocking] == [SCOPE]
    shown = CliRunner().invoke(
        cli, ["queue", "why", waiting, "--database", database_url], env={"COLUMNS": "200", "NO_COLOR": "1"}
    )
    assert shown.exit_code == 0, shown.output
    assert re.search(r"Blocked by: +rate tag:tenant=acme — 3 of 3 per 1h used; next start allowed in", shown.stdout)
    clock.advance(3601)  # a burst of the whole limit leaves one per hour (docs/rates.md)
    assert _claimed(tag_app, ["b"]) == [waiting]


def test_a_held_tenants_backlog_does_not_hide_another_tenants_run(tag_app: App) -> None:
    _submit(tag_app, "a", "acme", 3)
    assert len(_claimed(tag_app, ["a"], 3)) == 3
    _submit(tag_app, "a", "acme", 120)
    assert _claimed(tag_app, ["a"], 1) == []
    (globex,) = _submit(tag_app, "a", "globex")
    assert _claimed(tag_app, ["a"], 1) == [globex]  # the read steps over acme's held runs


def test_claimers_of_different_queues_never_take_past_a_tag_rate_together(tag_app: App, database_url: str) -> None:
    """Claimers of queue a and of queue b hold different claim turns; acme's rate is charged by
    both at once: together they take its 3 and no more (each adapter's lock or one writer)."""
    for queue in QUEUES:
        _submit(tag_app, queue, "acme", 10)
    claimed = claimed_together(database_url, QUEUES * 2, limit=2)
    assert len(claimed) == 3 and len(set(claimed)) == 3
