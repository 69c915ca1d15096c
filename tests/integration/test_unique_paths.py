"""Once per key on every path that makes runs: a submit by name without the task's code (the rule
is stored with the task's definition), a schedule's tick, a child triggered by a task."""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner

from tidegate import App, DuplicateRun, Unique
from tidegate.cli.main import app as cli
from tidegate.domain.keys import CheckedUnique


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
    assert len(app.store.list_runs()) == 3
