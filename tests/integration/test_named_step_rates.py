"""Named step rates through every door (issue 25), on both backends.

* A step held back by its rate sleeps until the time the store gave, not for a poll
  interval: with the poll at a minute, the second of two rated steps starts when the
  rate allows it, and `queue why` says the rate holds it back meanwhile.
* A step naming a rate nobody declared fails with a clear error; nothing is charged.
* Bad input (a zero or negative limit, an unparseable `per`, a bad name or cost) is
  refused with an error naming what is wrong, and nothing is stored, from Python
  (`App.set_rate_limit`, `@app.step(rates=...)`), the CLI (`tidegate rates set`) and
  HTTP (`PUT /api/v1/rates/NAME`).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from typer.testing import CliRunner

from tests.apps.api import local_client
from tidegate import App, RunStatus, Workflow
from tidegate.cli.main import app as cli
from tidegate.domain.errors import InvalidArgument
from tidegate.engine.operators import why

from .conftest import wait_until


def test_a_step_held_back_by_its_rate_sleeps_until_the_rate_allows_it(app: App, start_worker, monkeypatch) -> None:
    monkeypatch.setenv("TIDEGATE_CLAIM_POLL_INTERVAL", "60s")  # a poll would start the second a minute late
    monkeypatch.setenv("TIDEGATE_CLAIM_POLL_JITTER", "0s")
    app.set_rate_limit("warehouse_api", 1, per="2s", burst=1)
    app.set_pool_limit("warehouse_db", 2)
    starts: list[float] = []

    @app.step(rates={"warehouse_api": 1}, pool="warehouse_db")
    async def load(day: str) -> str:
        starts.append(time.monotonic())
        await asyncio.sleep(0)
        return day

    @app.workflow(name="wf.days")
    def days(wf: Workflow):
        return wf.map(load, ["mon", "tue"], concurrency=2)

    run = days.submit()
    start_worker()
    wait_until(lambda: len(starts) == 1, 30, message="the first step")
    explained = wait_until(
        lambda: next((c for c in why.explain(app.store, run.id).checks if c.scope == "rate:@warehouse_api"), None),
        10,
        message="queue why to name the rate",
    )
    assert not explained.ok and explained.rate is not None and 0 < (explained.rate.allowed_in or 0) <= 2
    assert explained.label == "rate warehouse_api"
    assert run.wait(timeout=30) == ["mon", "tue"]
    gap = starts[1] - starts[0]
    assert 1.5 <= gap < 10, gap  # the rate's 2 s (less what the first start's dispatch took), not the poll's 60 s
    assert [rate.waiting for rate in app.store.named_rates()] == [0]


def test_a_step_naming_an_undeclared_rate_fails_with_a_clear_error(app: App, start_worker) -> None:
    @app.step(rates={"nowhere": 1})
    def call() -> int:
        return 1

    @app.workflow(name="wf.undeclared")
    def undeclared(wf: Workflow):
        return wf.step(call)

    run = undeclared.submit()
    start_worker()
    wait_until(lambda: run.status() is RunStatus.FAILED, 30, message="the run to fail")
    assert "rate 'nowhere' is not declared" in (run.info().error or "")
    assert app.store.named_rates() == []


BAD_RATES = [
    ((0, "1s"), "Rate.limit must be a whole number from 1"),
    ((-5, "1s"), "Rate.limit must be a whole number from 1"),
    ((10, "soon"), "Rate.per: cannot read 'soon' as a duration"),
    ((10, "0s"), "Rate.per: '0s' is out of range"),
    ((10, None), "needs per="),
]


@pytest.mark.parametrize(("args", "message"), BAD_RATES)
def test_bad_rates_are_refused_at_every_door_and_nothing_is_stored(
    app: App, database_url: str, args, message: str
) -> None:
    limit, per = args
    with pytest.raises(InvalidArgument, match=message):
        app.set_rate_limit("api", limit, per=per)
    command = ["rates", "set", "api", str(limit), "--create", "--database", database_url]
    if per is not None:
        command[5:5] = ["--per", per]
        typed = CliRunner().invoke(cli, command)
        assert typed.exit_code == 1 and message in typed.output, typed.output
        client = local_client(app.asgi())
        answer = client.put("/api/v1/rates/api", json={"limit": limit, "per": per})
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"] == "invalid_argument" and message in answer.json()["detail"]
        assert answer.json()["field"] == ("per" if "per" in message else "limit")
    assert app.store.named_rates() == []
    assert [e for e in app.store.events_after(0, 100) if e.type == "LimitChanged"] == []


def test_bad_names_and_costs_are_refused_where_they_are_written(app: App, database_url: str) -> None:
    with pytest.raises(InvalidArgument, match="rate name 'a b' is not valid"):
        app.set_rate_limit("a b", 10, per="1s")
    with pytest.raises(InvalidArgument, match="burst"):
        app.set_rate_limit("api", 10, per="1s", burst=11)
    for rates, message in (
        ({"api": 0}, "rate 'api': cost must be an integer from 1"),
        ({"api": -1}, "rate 'api': cost must be an integer from 1"),
        ({"api": "1"}, "rate 'api': cost must be an integer from 1"),
        ({"a b": 1}, "rate name 'a b' is not valid"),
        (["api"], "rates must be a dict of rate name to cost"),
    ):
        with pytest.raises(InvalidArgument, match=message):
            app.step(name="s", rates=rates)(lambda: None)
    command = ["rates", "set", "a b", "10", "--per", "1s", "--create", "--database", database_url]
    typed = CliRunner().invoke(cli, command)
    assert typed.exit_code == 1 and "rate name 'a b' is not valid" in typed.output
    client = local_client(app.asgi())
    unknown = client.get("/api/v1/rates/nowhere")
    assert unknown.status_code == 404 and unknown.json()["error"] == "rate_not_found"
    extra = client.put("/api/v1/rates/api", json={"limit": 10, "per": "1s", "window": 3})
    assert extra.status_code == 422
    assert app.store.named_rates() == []


def test_a_rate_set_live_overrides_the_code_until_reset_at_every_door(app: App, database_url: str) -> None:
    app.set_rate_limit("api", 10, per="1s")
    client = local_client(app.asgi())
    changed = client.put("/api/v1/rates/api", json={"limit": 3, "per": "1m", "burst": 1})
    assert changed.status_code == 200, changed.text
    assert (changed.json()["label"], changed.json()["source"], changed.json()["code_rates"]) == (
        "3/1m",
        "override",
        "10/1s",
    )
    listed = CliRunner().invoke(cli, ["rates", "list", "--database", database_url], env={"COLUMNS": "200"})
    assert "3/1m" in listed.output and "override (code: 10/1s)" in listed.output
    assert app.set_rate_limit("api", 10, per="1s").source == "override"  # the next import keeps it
    page = client.get("/pools").text
    assert '<tr data-rate="api"><td class="mono">api</td><td class="mono">3/1m</td>' in page
    assert "override (code: 10/1s)" in page
    reset = client.delete("/api/v1/rates/api/override")
    assert reset.status_code == 200 and (reset.json()["rate"]["label"], reset.json()["rate"]["source"]) == (
        "10/1s",
        "code",
    )
