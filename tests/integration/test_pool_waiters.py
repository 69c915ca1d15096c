"""A pool's pending steps are listed, not only counted (issue 28), on both backends.

One engine read (`pool_config.pool_waiters`, over the step rows `pools`
counts) feeds `tidegate pools info`, `GET /api/v1/pools/{name}` and the
dashboard's `/pools`: each waiting step's run, step key, slots asked and
since when it waits, longest waiting first.
"""

from __future__ import annotations

import json
from datetime import timedelta

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tidegate import App
from tidegate.api import Tokens, create_api
from tidegate.cli.main import app as cli
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.model import CycleRequest
from tidegate.domain.pools import pool_needs
from tidegate.domain.steps import SlotRequest
from tidegate.engine.operators import pool_config


def _waiting_steps(app: App, clock: ShiftedClock) -> list[tuple[str, str, int]]:
    """One step holding the pool's only slot, then two steps of other runs asking for it, 5 s apart."""
    app.set_pool_limit("db", 1)
    job = app.task(name="t.etl")(lambda: None)
    ids = [job.submit().id for _ in range(3)]
    fences = {run.id: run.fence for run in app.store.cycle(CycleRequest("w1", ["default"], [], [], 3, 60)).claimed}
    assert app.store.acquire_slots(fences[ids[0]], "w1", SlotRequest("extract", pool_needs({"db": 1}), {})).granted
    asked = [(ids[1], "load", 1), (ids[2], "save", 1)]
    for run_id, key, slots in asked:
        assert not app.store.acquire_slots(
            fences[run_id], "w1", SlotRequest(key, pool_needs({"db": slots}), {})
        ).granted
        clock.advance(5)
    return asked


def test_the_steps_a_pool_counts_pending_are_listed_by_every_face(app: App, database_url: str, clock) -> None:
    asked = _waiting_steps(app, clock)
    waiting = pool_config.pool_waiters(app.store, "db")
    assert [(w.run_id, w.step_key, w.slots) for w in waiting] == asked
    first, second = (w.since for w in waiting)
    assert first is not None and second is not None and second - first >= timedelta(seconds=4)
    [pool] = pool_config.list_pools(app.store)
    assert pool.pending == len(waiting) == 2
    assert pool_config.pool_waiters(app.store, "other") == []

    env = {"COLUMNS": "200", "NO_COLOR": "1"}
    shown = CliRunner().invoke(cli, ["pools", "info", "db", "--database", database_url], env=env)
    assert shown.exit_code == 0, shown.output
    rows = [line.split() for line in shown.stdout.splitlines()]
    assert [row[:3] for row in rows if row and row[0] in {asked[0][0], asked[1][0]}] == [
        [asked[0][0], "load", "1"],  # not a holder: the holder is ids[0]
        [asked[1][0], "save", "1"],
    ]
    as_json = CliRunner().invoke(cli, ["pools", "info", "db", "--json", "--database", database_url], env=env)
    listed = [(w["run_id"], w["step_key"], w["slots"]) for w in json.loads(as_json.stdout)["waiting"]]
    assert listed == asked

    browser = TestClient(create_api(app, tokens=Tokens()), base_url="http://127.0.0.1")
    body = browser.get("/api/v1/pools/db").json()
    assert [(w["run_id"], w["step_key"], w["slots"]) for w in body["waiting"]] == asked
    assert all(w["waiting_since"] for w in body["waiting"]) and body["pending"] == 2
    page = browser.get("/pools").text
    for run_id, key, slots in asked:
        assert f'<tr data-waiting="{run_id}"><td><a class="mono" href="/runs/{run_id}"' in page
        assert f'<td class="mono">{key}</td><td class="num">{slots}</td>' in page
