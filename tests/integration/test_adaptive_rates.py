"""Adaptive rates (issue 25, scope item 6), on both backends: a window declared
`Rate(..., adaptive=Adaptive(min=...))` is lowered multiplicatively when the queue's runs report
overload and raised additively after successes charged while it was in use, within [min,
declared]; stored, in force at the next claim, audited as `LimitChanged` with source `adaptive`,
shown with its reason on `limits list`, `GET /limits`, `/limits`, `queue why` and `/metrics`; a
live override wins over it. Claims are explicit cycles, so every count is exact.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tidegate import Adaptive, App, Rate
from tidegate.api import Tokens, create_api
from tidegate.cli.main import app as cli
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind, RunRecord
from tidegate.engine.operators import limits

LEASE = 30.0
TARGET = "rate:partner@1m"


def _invoke(*args: str) -> Any:
    result = CliRunner().invoke(cli, list(args), env={"COLUMNS": "250", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result


def _claim(app: App, limit: int) -> list[Any]:
    return app.store.cycle(CycleRequest("w1", ["partner"], [], [], limit, LEASE)).claimed


def _report(app: App, outcomes: list[Outcome], claimed: list[Any]) -> None:
    app.store.cycle(CycleRequest("w1", ["partner"], [run.fence for run in claimed], outcomes, 0, LEASE))


def _in_force(app: App) -> int:
    return app.store.rules().rate_windows("rate:partner")[0].limit


def test_an_overload_lowers_the_rate_successes_in_use_raise_it_and_an_override_wins(
    app: App, database_url: str
) -> None:
    app.queue("partner", rate=Rate(limit=8, per="1m", burst=8, adaptive=Adaptive(min=2, decrease=0.5, after=2)))
    job = app.task(name="t.partner", queue="partner")(lambda: None)
    for _ in range(12):
        job.submit()
    [first] = _claim(app, 1)
    _report(app, [Outcome(first.id, first.attempt, OutcomeKind.SNOOZED, retry_delay=3600.0, overloaded=True)], [first])
    assert _in_force(app) == 4  # 8 * 0.5
    event = app.store.latest_events("LimitChanged", 1)[0].metadata
    assert (event["target"], event["old"], event["new"], event["source"]) == (TARGET, 8, 4, "adaptive")

    claimed = _claim(app, 10)
    assert len(claimed) == 3  # the lowered window's burst (4 * 8 // 8) less the one charged before
    _report(app, [Outcome(run.id, run.attempt, OutcomeKind.COMPLETED) for run in claimed[:2]], claimed[:2])
    assert _in_force(app) == 5  # two successes charged back to back, the window in use: + 1
    assert app.store.latest_events("LimitChanged", 1)[0].metadata["new"] == 5

    words = "adaptive 5 of 8 (recovered)"
    listed = json.loads(_invoke("limits", "list", "--json", "--database", database_url).stdout)
    row = next(row for row in listed["limits"] if row["target"] == TARGET)
    assert (row["limit"], row["code_limit"], row["adaptive"], row["per"]) == (5, 8, words, 60.0)
    assert words in _invoke("limits", "list", "--database", database_url).stdout
    client = TestClient(create_api(app, tokens=Tokens()), base_url="http://127.0.0.1")
    api_row = next(row for row in client.get("/api/v1/limits").json()["limits"] if row["target"] == TARGET)
    assert (api_row["limit"], api_row["adaptive"]) == (5, words)
    assert f'data-testid="adaptive">{words}<' in client.get("/limits").text
    metrics = client.get("/metrics").text
    assert f'tidegate_scope_adaptive_limit{{reason="recovered",scope="{TARGET}"}} 5.0' in metrics
    assert 'tidegate_rate_tokens_limit{per="1m",scope="rate:partner"} 5.0' in metrics
    queued = [run for run in app.store.list_queued(limit=20) if isinstance(run, RunRecord)]
    why = _invoke("queue", "why", queued[0].id, "--database", database_url).stdout
    assert f"rate partner (1m {words})" in why

    limits.set_limit(app.store, TARGET, 7)
    assert _in_force(app) == 7  # a live override wins
    limits.reset_limit(app.store, TARGET)
    assert _in_force(app) == 5  # and the effective limit is back once it is reset


def test_successes_of_a_trickle_that_never_fills_the_rate_do_not_raise_it(app: App, clock: ShiftedClock) -> None:
    app.queue("partner", rate=Rate(limit=8, per="1m", burst=8, adaptive=Adaptive(min=2, decrease=0.5, after=1)))
    job = app.task(name="t.partner", queue="partner")(lambda: None)
    job.submit()
    [first] = _claim(app, 1)
    _report(app, [Outcome(first.id, first.attempt, OutcomeKind.SNOOZED, retry_delay=3600.0, overloaded=True)], [first])
    assert _in_force(app) == 4
    clock.advance(200)  # the window drains: the next start finds it empty for more than an interval (60 s)
    job.submit()
    [alone] = _claim(app, 1)
    _report(app, [Outcome(alone.id, alone.attempt, OutcomeKind.COMPLETED)], [alone])
    assert _in_force(app) == 4  # a success on an empty window says nothing of the room above it
    job.submit()
    job.submit()
    pair = _claim(app, 2)  # charged while the lone start's interval still runs: the window is in use
    _report(app, [Outcome(run.id, run.attempt, OutcomeKind.COMPLETED) for run in pair], pair)
    assert _in_force(app) == 6  # + 1 after each success (after=1)


@pytest.mark.parametrize(
    ("adaptive", "message"),
    [
        (Adaptive(min=9), r"Adaptive.min \(9\) is above the limit it adapts \(8\)"),
        ("fast", "Rate.adaptive must be a tidegate.Adaptive"),
    ],
)
def test_a_bad_adaptive_rate_is_refused_where_it_is_written(adaptive: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Rate(limit=8, per="1m", adaptive=adaptive)
    with pytest.raises(ConfigurationError, match=r"Adaptive.min must be a whole number from 1"):
        Rate(limit=8, per="1m", adaptive=Adaptive(min=0))
