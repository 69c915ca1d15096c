"""Weighted rates: `rate_cost` (a whole number, or a function of the args evaluated at submit and
stored with the run), charged by the claim; a bad cost refused at every door with nothing stored.

On both backends: the cost is a column of the run (and of the task's registration, for a
submit by name), written by every submit path and read by the claim's SQL.
"""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from tests.apps.api import local_client
from tests.conftest import execute_sql
from tidegate import App, Rate
from tidegate.cli.main import app as cli
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.errors import ConfigurationError, InvalidArgument
from tidegate.domain.model import CycleRequest

# limit 10 per minute, burst 5: one cost unit every 10 s after a burst of 5 units
RATE = Rate(limit=10, per="1m", burst=5)


def _claim(app: App, limit: int = 10) -> list[str]:
    return [run.id for run in app.store.cycle(CycleRequest("w1", ["api"], [], [], limit, 60)).claimed]


def _costs(database_url: str) -> dict[str, int]:
    return dict(execute_sql(database_url, "SELECT id, rate_cost FROM tidegate_runs"))


def _declare(app: App) -> None:
    app.queue("api", rate=RATE)

    @app.task(name="heavy", queue="api", rate_cost=5)
    def heavy() -> None:
        return None

    @app.task(name="light", queue="api")
    def light() -> None:
        return None

    @app.task(name="tokens", queue="api", rate_cost=lambda args: args["tokens"] // 1000 + 1)
    def tokens(tokens: int) -> None:
        return None

    app.declare()


def test_a_weighted_run_takes_its_cost_of_the_window(app: App, clock: ShiftedClock, database_url: str) -> None:
    _declare(app)
    heavy = app.tasks["heavy"].submit().id
    light = app.tasks["light"].submit().id
    assert _costs(database_url) == {heavy: 5, light: 1}
    assert _claim(app) == [heavy]  # the whole burst: the light run waits for the next unit
    clock.advance(11)
    assert _claim(app) == [light]


def test_a_function_of_the_args_is_evaluated_at_submit_and_stored(app: App, database_url: str) -> None:
    _declare(app)
    runs = [app.tasks["tokens"].submit(tokens=n).id for n in (0, 2500, 4999)]
    assert [_costs(database_url)[run] for run in runs] == [1, 3, 5]
    given = app.tasks["tokens"].options(rate_cost=2).submit(tokens=4999).id  # the submit's own wins
    assert _costs(database_url)[given] == 2
    assert _claim(app) == runs[:2]  # 1 + 3 of the burst of 5; the next (5) waits


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (0, "rate_cost returned a value that must be an integer from 1"),
        (-3, "rate_cost returned a value that must be an integer from 1"),
        (1.5, "rate_cost returned a value that must be an integer from 1"),
        ("2", "rate_cost returned a value that must be an integer from 1"),
        (True, "rate_cost returned a value that must be an integer from 1"),
        (6, "rate_cost 6 exceeds the burst 5 of its queue's rate 10/1m"),
    ],
)
def test_a_bad_answer_of_the_function_is_refused_and_nothing_is_stored(app: App, answer: Any, message: str) -> None:
    app.queue("api", rate=RATE)
    task = app.task(name="bad", queue="api", rate_cost=lambda args: answer)(lambda: None)
    with pytest.raises(InvalidArgument, match=message):
        task.submit()
    with pytest.raises(InvalidArgument, match="bad: rate_cost"):
        task.submit_many([{}, {}])
    assert app.store.page_runs() == []


def test_a_function_that_raises_is_refused_naming_the_error(app: App) -> None:
    app.queue("api", rate=RATE)
    task = app.task(name="bad", queue="api", rate_cost=lambda args: args["missing"])(lambda: None)
    with pytest.raises(InvalidArgument, match="bad: rate_cost raised KeyError"):
        task.submit()
    assert app.store.page_runs() == []


@pytest.mark.parametrize("declared", [0, -1, 2.5, "3", True, None])
def test_a_bad_declaration_is_refused_at_the_decorator(app: App, declared: Any) -> None:
    with pytest.raises(ConfigurationError, match="task bad: rate_cost must be an integer from 1"):
        app.task(name="bad", rate_cost=declared)(lambda: None)


@pytest.mark.parametrize("given", [0, -1, 6])
def test_a_bad_cost_given_with_the_submit_is_refused(app: App, given: int) -> None:
    _declare(app)
    with pytest.raises(InvalidArgument, match="rate_cost"):
        app.tasks["light"].options(rate_cost=given).submit()
    with pytest.raises(InvalidArgument, match="rate_cost"):
        app.submit("light", rate_cost=given)
    assert app.store.page_runs() == []


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "250", "NO_COLOR": "1"})


def test_the_cli_submits_the_stored_cost_or_its_own_and_refuses_a_bad_one(app: App, database_url: str) -> None:
    _declare(app)
    heavy = invoke("submit", "heavy", "--database", database_url)
    given = invoke("submit", "light", "--rate-cost", "3", "--database", database_url)
    assert heavy.exit_code == 0 and given.exit_code == 0, heavy.output + given.output
    assert _costs(database_url) == {heavy.stdout.strip(): 5, given.stdout.strip(): 3}
    for extra, message in (
        (("--rate-cost", "0"), "rate_cost must be an integer from 1"),
        (("--rate-cost", "9"), "rate_cost 9 exceeds the burst 5"),
    ):
        result = invoke("submit", "light", *extra, "--database", database_url)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.exit_code == 1 and len(lines) == 1 and message in lines[0], (extra, result.output)
    # A cost that is a function of the args cannot be evaluated without the task's code: the
    # submit says so and stores nothing, unless it gives the cost itself.
    refused = invoke("submit", "tokens", "-a", "tokens=10", "--database", database_url)
    assert refused.exit_code == 1 and "does not have the task's code" in refused.stderr, refused.output
    named = invoke("submit", "tokens", "-a", "tokens=10", "--rate-cost", "2", "--database", database_url)
    assert named.exit_code == 0, named.output
    assert len(_costs(database_url)) == 3


def test_http_takes_a_cost_in_the_body_and_refuses_a_bad_one_naming_the_field(app: App, database_url: str) -> None:
    _declare(app)
    client = local_client(app.asgi())
    made = client.post("/api/v1/runs", json={"task": "tokens", "args": {"tokens": 2500}})
    given = client.post("/api/v1/runs", json={"task": "light", "rate_cost": 4})
    assert (made.status_code, given.status_code) == (201, 201), made.text + given.text
    assert _costs(database_url) == {made.json()["id"]: 3, given.json()["id"]: 4}
    for body, field in (
        ({"task": "light", "rate_cost": 0}, "rate_cost"),
        ({"task": "light", "rate_cost": 6}, "rate_cost"),
        ({"task": "light", "rate_cost": "2"}, "rate_cost"),
        ({"task": "light", "rate_cost": 1.5}, "rate_cost"),
        ({"task": "tokens", "args": {"tokens": -5000}}, "args"),  # the function answers 0 (bad args)
    ):
        response = client.post("/api/v1/runs", json=body)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["field"] == field, (body, response.json())
    batch = client.post("/api/v1/runs/batch", json={"runs": [{"task": "light"}, {"task": "light", "rate_cost": 0}]})
    assert batch.status_code == 422 and batch.json()["field"] == "runs.1.rate_cost", batch.text
    assert len(_costs(database_url)) == 2


def test_a_task_reports_its_cost_from_its_context(app: App, start_worker: Any) -> None:
    """The worker's `ctx.report_cost` corrects the charge of the attempt it runs: reported 5 of a
    start charged 1, the window's state is five units (50 s) ahead of the claim, not one."""
    from tidegate import Context
    from tidegate.domain.rates import NS, to_ns

    app.queue("api", rate=RATE)
    refused: list[str] = []

    @app.task(name="reporting", queue="api")
    def reporting(ctx: Context) -> bool:
        try:
            ctx.report_cost(-1)
        except InvalidArgument as error:
            refused.append(str(error))
        return ctx.report_cost(5)

    handle = reporting.submit()
    start_worker(queues=["api"], max_workers=1)
    assert handle.wait(timeout=20) is True
    assert refused == ["report_cost must be an integer from 0 to 2147483647, got -1"]
    read = app.store.rate_states()
    [tat] = read.states.values()
    ahead = (tat - to_ns(read.now)) / NS
    assert 35 < ahead <= 50, ahead  # five units of 10 s from the claim (less the time since)
