"""The public seam under a batch of several tasks: `TaskOptions.new_runs` builds, `App.enqueue` stores.

The HTTP batch route stores runs of different tasks in one transaction; it
does so through these two public calls, so they must keep their promises:
building stores nothing, storing is all or none, and storing registers the
app's declarations first (so the ceilings its code declares are in force).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.apps.api import store_size
from tidegate import AdmissionRejected, App, InvalidArgument, RunStatus


def _declare(app: App) -> None:
    app.queue("narrow", max_active=1)

    @app.task(name="wide")
    def wide(n: int) -> int:
        return n

    @app.task(name="slim", queue="narrow")
    def slim() -> None:
        return None


def test_new_runs_stores_nothing_and_enqueue_stores_two_tasks_runs_together(app: App, database_url: str) -> None:
    _declare(app)
    app.store.check_schema()
    before = store_size(database_url)
    runs = [*app.tasks["wide"].options().new_runs([{"n": 1}, {"n": 2}]), *app.tasks["slim"].options().new_runs([{}])]
    assert store_size(database_url) == before

    handles = app.enqueue(runs)
    assert [handle.id for handle in handles] == [run.id for run in runs]
    assert {app.store.get_run(run.id).task for run in runs} == {"wide", "slim"}
    assert all(handle.status() is RunStatus.QUEUED for handle in handles)
    assert app.store.get_task("slim") is not None  # the declarations went to the store first


def test_enqueue_is_all_or_none_under_the_ceiling_its_app_declares(app: App, database_url: str) -> None:
    _declare(app)
    app.store.check_schema()
    before = store_size(database_url)
    runs = [*app.tasks["wide"].options().new_runs([{"n": 1}]), *app.tasks["slim"].options().new_runs([{}, {}])]
    with pytest.raises(AdmissionRejected):
        app.enqueue(runs)  # two runs into a queue of at most one active: nothing of the batch is stored
    assert store_size(database_url) == before


def test_due_in_applies_the_run_at_rule_runs_are_built_by(app: App) -> None:
    _declare(app)
    options = app.tasks["wide"].options(run_at=timedelta(minutes=5))
    assert options.due_in() == 300.0
    too_far = app.tasks["wide"].options(run_at=timedelta(days=365 * 101))
    with pytest.raises(InvalidArgument, match="out of range"):
        too_far.due_in()
    with pytest.raises(InvalidArgument, match="out of range"):
        too_far.new_runs([{"n": 1}])
