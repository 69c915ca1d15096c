"""Children honour `Unique` (issue 26), end to end on both adapters.

A parent that triggers a child of a task declared `unique=` gets the run holding the key (it
may be another parent's child, or a submitted run) instead of a second run: its position is
linked to that run, its wait waits on it, and its replay finds it again. A link is not a child
of its own: canceling the parent leaves the holder running.
"""

from __future__ import annotations

import json
import re
import threading

import pytest
from typer.testing import CliRunner

from tests.apps.api import local_client
from tidegate import App, Context, DuplicateRun, RunFailed, RunStatus, Unique
from tidegate.api.application import create_api
from tidegate.cli.main import app as cli

from .conftest import wait_status


def _runs_of(app: App, task: str) -> list[str]:
    return [run.id for run in app.store.page_runs(limit=1000) if run.task == task]


def test_two_parents_starting_one_unique_child_share_its_one_run(app, start_worker):
    """Both parents trigger at once (a barrier): one run of the child, both parents complete with
    its result; one parent's position is its own child, the other's a link to it."""
    both = threading.Barrier(2, timeout=20)

    @app.task(name="report", queue="kids", unique=Unique(by_args=["customer_id"]))
    def report(customer_id: int) -> str:
        return f"report {customer_id}"

    @app.task(name="parent", queue="parents")
    def parent(ctx: Context, n: int) -> str:
        if ctx.attempt == 1:
            both.wait()
        return ctx.trigger_and_wait(report, customer_id=7)

    first, second = parent.submit(n=1), parent.submit(n=2)
    start_worker(max_workers=2, queues=["parents"])
    wait_status(app, first.id, RunStatus.WAITING)
    wait_status(app, second.id, RunStatus.WAITING)
    assert len(_runs_of(app, "report")) == 1  # one run, though two parents asked at once
    start_worker(max_workers=1, queues=["kids"])
    assert first.wait(timeout=30) == "report 7" and second.wait(timeout=30) == "report 7"
    [child_id] = _runs_of(app, "report")
    links = [app.store.run_children(handle.id)[0] for handle in (first, second)]
    assert [link.id for link in links] == [child_id, child_id]
    assert sorted(link.linked for link in links) == [False, True]


def test_a_parent_linked_to_a_submitted_run_waits_on_it_and_its_replay_finds_it_again(app, start_worker):
    """The holder is a plain submit (no parent): its end resumes the linked parent, and the
    parent's later replays answer the linked position from the store (no second run)."""
    attempts: list[int] = []

    @app.task(name="refresh", queue="kids", unique=Unique(by_args=["customer_id"]))
    def refresh(customer_id: int, note: str = "") -> str:
        return f"refreshed {customer_id}{note}"

    @app.task(name="double", queue="kids")
    def double(n: int) -> int:
        return 2 * n

    @app.task(name="parent", queue="parents")
    def parent(ctx: Context) -> str:
        attempts.append(ctx.attempt)
        shared = ctx.trigger_and_wait(refresh, customer_id=3, note=" by parent")  # key: customer_id only
        return f"{shared}, {ctx.trigger_and_wait(double, n=21)}"

    holder = refresh.submit(customer_id=3)
    handle = parent.submit()
    start_worker(max_workers=1, queues=["parents"])
    wait_status(app, handle.id, RunStatus.WAITING)
    start_worker(max_workers=1, queues=["kids"])
    assert handle.wait(timeout=30) == "refreshed 3, 42"
    assert attempts == [1, 2, 3]  # the third attempt replayed the link
    assert _runs_of(app, "refresh") == [holder.id]
    link, own = app.store.run_children(handle.id)
    assert (link.id, link.linked, link.args) == (holder.id, True, {"customer_id": 3, "note": " by parent"})
    assert not own.linked and app.store.get_run(own.id).parent_id == handle.id
    assert app.store.get_run(holder.id).parent_id is None  # a link adopts nothing
    triggered = [event.metadata for event in app.store.run_events(handle.id) if event.type == "ChildTriggered"]
    assert triggered[0] == {"child": holder.id, "task": "refresh", "index": 0, "awaited": True, "linked": True}
    _shown_linked(app, handle.id, linked=holder.id, own=own.id)


def _shown_linked(app: App, parent_id: str, *, linked: str, own: str) -> None:
    """Where a parent's children are listed, the link says so: the HTTP API's `linked`, a
    dashboard badge, `runs show --json`."""
    client = local_client(create_api(app))
    shown = client.get(f"/api/v1/runs/{parent_id}").json()["children"]
    assert [(child["id"], child["linked"]) for child in shown] == [(linked, True), (own, False)]
    page = client.get(f"/runs/{parent_id}?tab=children").text
    rows = dict(re.findall(r'<tr data-child="([^"]+)">(.*?)</tr>', page, re.S))
    assert 'data-testid="linked"' in rows[linked] and 'data-testid="linked"' not in rows[own]
    printed = CliRunner().invoke(cli, ["runs", "show", parent_id, "--database", app.database, "--json"])
    assert printed.exit_code == 0, printed.output
    assert [child["linked"] for child in json.loads(printed.output)["children"]] == [True, False]


def test_a_failed_holder_fails_its_linked_parent_and_frees_the_key(app, start_worker):
    @app.task(name="fragile", queue="kids", unique=Unique(by_args=True), max_attempts=1)
    def fragile(n: int) -> int:
        if n == 1 and len(_runs_of(app, "fragile")) == 1:
            raise ValueError("first run fails")
        return n

    @app.task(name="parent", queue="parents")
    def parent(ctx: Context) -> str:
        try:
            return f"got {ctx.trigger_and_wait(fragile, n=1)}"
        except RunFailed as error:
            return f"failed {error.run_id}"

    holder = fragile.submit(n=1)
    linked = parent.submit()
    start_worker(max_workers=1, queues=["parents"])
    wait_status(app, linked.id, RunStatus.WAITING)
    start_worker(max_workers=1, queues=["kids"])
    assert linked.wait(timeout=30) == f"failed {holder.id}"
    later = parent.submit()  # the failed run holds no key: a new run is made for it
    assert later.wait(timeout=30) == "got 1"
    assert len(_runs_of(app, "fragile")) == 2
    assert not app.store.run_children(later.id)[0].linked


def test_canceling_a_linked_parent_leaves_the_holder_it_did_not_create(app, start_worker):
    @app.task(name="idle_child", queue="idle", unique=Unique())
    def idle_child(n: int) -> None:
        pass  # never runs here: no worker serves its queue

    @app.task(name="parent", queue="parents")
    def parent(ctx: Context) -> None:
        ctx.trigger_and_wait(idle_child, n=1)

    holder = idle_child.submit(n=1)
    handle = parent.submit()
    start_worker(max_workers=1, queues=["parents"])
    wait_status(app, handle.id, RunStatus.WAITING)
    assert handle.cancel() is RunStatus.CANCELED
    assert app.store.get_run(holder.id).status is RunStatus.QUEUED
    assert idle_child.submit(n=1).id == holder.id  # it still holds its key


def test_a_child_keyed_to_its_own_parent_is_a_wait_cycle(app, start_worker):
    """A parent that waits on a child whose key it holds itself would wait for good."""

    @app.task(name="recurse", queue="parents", unique=Unique(by_args=True))
    def recurse(ctx: Context, n: int) -> int:
        return ctx.trigger_and_wait(recurse, n=n)

    handle = recurse.submit(n=5)
    start_worker(max_workers=1, queues=["parents"])
    with pytest.raises(RunFailed) as raised:
        handle.wait(timeout=30)
    assert "WAIT_CYCLE" in raised.value.error
    assert _runs_of(app, "recurse") == [handle.id] and app.store.run_children(handle.id) == []


def test_a_debounced_child_takes_the_last_args_of_its_key(app, start_worker):
    @app.task(name="reindex", queue="kids", unique=Unique(by_args=["doc_id"], debounce="300ms", max_wait="5s"))
    def reindex(doc_id: int, version: int) -> int:
        return version

    @app.task(name="parent", queue="parents")
    def parent(ctx: Context) -> list[int]:
        ctx.trigger(reindex, doc_id=1, version=1)
        ctx.trigger(reindex, doc_id=1, version=2)
        return ctx.batch_trigger_and_wait(reindex, [{"doc_id": 1, "version": 3}])

    handle = parent.submit()
    start_worker(max_workers=2, queues=["parents", "kids"])
    assert handle.wait(timeout=30) == [3]
    [run_id] = _runs_of(app, "reindex")
    assert app.store.get_run(run_id).args == {"doc_id": 1, "version": 3}
    assert [child.linked for child in app.store.run_children(handle.id)] == [False, True, True]


def test_a_unique_child_that_raises_on_conflict_raises_in_its_parent(app, start_worker):
    @app.task(name="once", queue="idle", unique=Unique(on_conflict="raise"))
    def once(n: int) -> None:
        pass

    @app.task(name="parent", queue="parents")
    def parent(ctx: Context) -> str:
        try:
            ctx.trigger(once, n=1)
        except DuplicateRun as error:
            return f"duplicate of {error.run_id}"
        return "stored"

    holder = once.submit(n=1)
    handle = parent.submit()
    start_worker(max_workers=1, queues=["parents"])
    assert handle.wait(timeout=30) == f"duplicate of {holder.id}"
    assert app.store.run_children(handle.id) == []


def test_runs_show_marks_a_linked_child(app, start_worker):
    from rich.console import Console

    from tidegate.cli.children import children_table

    @app.task(name="shared", queue="idle", unique=Unique())
    def shared(n: int) -> None:
        pass

    @app.task(name="parent", queue="parents")
    def parent(ctx: Context) -> None:
        ctx.trigger(shared, n=1)

    holder = shared.submit(n=1)
    handle = parent.submit()
    start_worker(max_workers=1, queues=["parents"])
    handle.wait(timeout=30)
    console = Console(width=200, record=True)
    console.print(children_table(app.store.run_children(handle.id)))
    assert f"{holder.id} (linked)" in console.export_text()
