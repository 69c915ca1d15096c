"""Once per key on every path that makes runs: a submit by name without the task's code (the rule
is stored with the task's definition), a schedule's tick, a child triggered by a task."""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner

from tidegate import App, DuplicateRun, Unique
from tidegate.cli.main import app as cli
from tidegate.domain.keys import CheckedUnique
from tidegate.engine.runtime.schedules import fire_due


def _declared(app: App) -> None:
    @app.task(name="u.named", unique=Unique(by_args=["customer_id"], period="1h", on_conflict="existing"))
    def named(customer_id: int, note: str = "") -> None:
        return None

    @app.task(name="u.named_strict", unique=Unique(by_args=True, on_conflict="raise"))
    def strict(x: int) -> None:
        return None

    app.declare()


def test_the_rule_is_stored_with_the_task_and_read_back_whole(app: App) -> None:
    _declared(app)
    stored = app.store.get_task("u.named")
    assert stored is not None and stored.unique == CheckedUnique(
        ("customer_id",), False, 3600.0, ("queued", "running", "waiting"), "existing", None, None
    )
    assert app.store.get_task("u.named_strict").unique.on_conflict == "raise"  # type: ignore[union-attr]


def test_a_submit_by_name_without_the_code_applies_the_tasks_rule(app: App, database_url: str) -> None:
    _declared(app)
    first = app.submit("u.named", {"customer_id": 3, "note": "a"})
    with App(database_url) as bare:  # knows the tasks only by what the store holds
        again = bare.submit("u.named", {"customer_id": 3, "note": "b"})
        assert again.id == first.id and again.duplicate
        assert not bare.submit("u.named", {"customer_id": 4}).duplicate
        bare.submit("u.named_strict", {"x": 1})
        try:
            bare.submit("u.named_strict", {"x": 1})
        except DuplicateRun as error:
            assert error.handle.duplicate
        else:
            raise AssertionError("on_conflict='raise' was not applied from the stored rule")
    result: Any = CliRunner().invoke(cli, ["submit", "u.named", "-a", "customer_id=3", "--database", database_url])
    assert result.exit_code == 0 and result.stdout.strip() == first.id and "duplicate" in result.stderr
    assert len(app.store.page_runs()) == 3


def _skips(app: App) -> list[tuple[str, dict[str, Any]]]:
    return [
        (event.run_id, event.metadata)
        for event in app.store.events_after(0, 10_000)
        if event.type == "ScheduleTickSkipped"
    ]


def _to_next_tick(app: App, clock: Any, name: str) -> None:
    [record] = [found for found in app.store.list_schedules() if found.name == name]
    clock.advance(max(0.0, record.next_fire_at.timestamp() - app.clock.wall()) + 0.5)


def test_a_tick_that_meets_a_held_key_is_recorded_as_skipped(app: App, clock: Any) -> None:
    @app.schedule("* * * * *", name="every-minute", args={"x": 1})
    @app.task(name="u.ticked", unique=Unique(on_conflict="raise"))  # a tick never raises: it is skipped
    def ticked(x: int) -> None:
        return None

    app.worker()  # made, not run: it stores the schedule (ticks are fired here, by fire_due)
    _to_next_tick(app, clock, "every-minute")
    assert fire_due(app.store) == 1
    [holder] = app.store.page_runs()
    _to_next_tick(app, clock, "every-minute")
    assert fire_due(app.store) == 0  # the first run is still queued: it holds the key
    [(run_id, skipped)] = _skips(app)
    assert run_id == holder.id and skipped["schedule"] == "every-minute" and len(skipped["key"]) == 64
    [record] = app.store.list_schedules()
    assert record.last_run_id == holder.id and record.last_fire_at is not None
    assert [run.id for run in app.store.page_runs()] == [holder.id]
    app.run(holder.id).cancel()  # a canceled run frees its key: the next tick stores a run
    _to_next_tick(app, clock, "every-minute")
    assert fire_due(app.store) == 1 and len(app.store.page_runs()) == 2 and len(_skips(app)) == 1
