"""A dead worker's runs say "worker heartbeat lost N s ago" as soon as its heartbeat is late
(issue 23 item 3), on both backends: in `GET /api/v1/runs` and `/runs/{id}`, on the dashboard's
runs list and run page, and in `tidegate runs list` / `runs show`.

A worker claims and starts a run, then never calls the store again (as after `kill -9`). Workers
heartbeat every third of their lease; two missed (more than two thirds of the lease without one,
on the store's clock) and the heartbeat is lost, long before the lease expires (`stuck`). The API
and the dashboard are moved there with the app's clock; the CLI judges on real time, so its dead
worker's registry entry is short-lived while the run's lease is long.
"""

from __future__ import annotations

import json
import re
from typing import Any

from typer.testing import CliRunner

from tests.apps.api import local_client
from tests.conftest import wait_until
from tidegate import App
from tidegate.cli.main import app as cli
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.leases import heartbeat_lost
from tidegate.domain.model import CycleRequest, WorkerRegistration

DEAD, ALIVE = "host-a:4242:abcd1234", "host-b:77:ffff0000"
LEASE, LONG = 30.0, 3600.0  # seconds: the dead worker's lease (and heartbeat), the live one's


def _start(app: App, worker: str, ttl: float, lease: float | None = None) -> str:
    """A run claimed and started by `worker` (registry entry `ttl` long; the run's lease `lease`, else `ttl`)."""
    run_id = app.submit("jobs.crunch").id
    app.store.register_worker(WorkerRegistration(worker, 2, ["default"], False, ttl))
    [claimed] = app.store.cycle(CycleRequest(worker, ["default"], [], [], 1, lease or ttl)).claimed
    assert claimed.id == run_id
    app.store.cycle(CycleRequest(worker, ["default"], [claimed.fence], [], 0, lease or ttl))  # its start is recorded
    return run_id


def test_the_rule_is_two_missed_heartbeats_of_a_third_of_the_lease_each() -> None:
    assert not heartbeat_lost(20.0, 30.0)  # one beat late at most: a slow round trip
    assert heartbeat_lost(20.1, 30.0)
    assert not heartbeat_lost(2399.0, 3600.0)


def test_the_api_and_the_dashboard_say_a_dead_worker_s_heartbeat_is_lost_before_its_lease_expires(
    app: App, clock: ShiftedClock
) -> None:
    app.task(name="jobs.crunch")(lambda: None)
    dead = _start(app, DEAD, LEASE)
    alive = _start(app, ALIVE, LONG)
    queued = app.submit("jobs.crunch").id
    client = local_client(app.asgi())
    clock.advance(LEASE / 2)  # one heartbeat missed: not yet lost
    assert client.get(f"/api/v1/runs/{dead}").json()["worker_heartbeat_lost_s"] is None

    clock.advance(LEASE / 3)  # 25 s of 30 without a heartbeat: lost, and the lease not yet expired
    shown = client.get(f"/api/v1/runs/{dead}").json()
    assert (shown["status"], shown["stuck"]) == ("running", False)
    assert 25 <= shown["worker_heartbeat_lost_s"] < 25 + LEASE / 3
    page = {run["id"]: run for run in client.get("/api/v1/runs").json()["runs"]}
    assert shown["worker_heartbeat_lost_s"] <= page[dead]["worker_heartbeat_lost_s"] < 25 + LEASE / 3
    assert page[alive]["worker_heartbeat_lost_s"] is None and page[queued]["worker_heartbeat_lost_s"] is None
    schema = client.get("/api/v1/openapi.json").json()["components"]["schemas"]["Run"]["properties"]
    assert "worker_heartbeat_lost_s" in schema

    listed = client.get("/runs").text
    row = next(line for line in listed.splitlines() if dead in line and "<tr>" in line)
    # The same bounds as the API's above: 25 s on the clock, plus what the test took (it showed 30 s at load 15).
    badge = re.search(r'data-testid="heartbeat-lost"[^>]*>worker heartbeat lost (\d+)s ago<', row)
    assert badge and 25 <= int(badge[1]) < 25 + LEASE / 3, row
    assert listed.count('data-testid="heartbeat-lost"') == 1  # not the live worker's run
    run_page = client.get(f"/runs/{dead}").text
    on_page = re.search(r"worker heartbeat lost (\d+)s ago", run_page)
    assert on_page and 25 <= int(on_page[1]) < 25 + LEASE / 3
    assert 'data-testid="heartbeat-lost"' not in client.get(f"/runs/{alive}").text


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "250", "NO_COLOR": "1"})


def test_runs_list_and_show_say_a_dead_worker_s_heartbeat_is_lost(app: App, database_url: str) -> None:
    app.task(name="jobs.crunch")(lambda: None)
    heartbeat = 0.3  # the dead worker's registry time to live: lost after 0.2 s without a heartbeat
    dead = _start(app, DEAD, heartbeat, lease=LONG)  # a lease that outlives the test: never stuck
    alive = _start(app, ALIVE, LONG)
    wait_until(
        lambda: any(
            w.id == DEAD and heartbeat_lost(w.heartbeat_age, w.lease_seconds) for w in app.store.list_workers()
        ),
        message="the dead worker's heartbeat to be late",
    )
    listed = invoke("runs", "list", "--database", database_url)
    assert listed.exit_code == 0, listed.output
    row = next(line for line in listed.stdout.splitlines() if line.startswith(dead))
    assert re.search(r"running \(worker heartbeat lost \d+s ago\)", row), row
    assert "heartbeat lost" not in next(line for line in listed.stdout.splitlines() if line.startswith(alive))
    assert "worker heartbeat lost: its worker missed two heartbeats" in listed.stdout

    shown = invoke("runs", "show", dead, "--database", database_url)
    assert re.search(r"worker heartbeat lost \d+s ago: its worker missed two heartbeats", shown.stdout)
    as_json = {
        run["id"]: run
        for run in json.loads(invoke("runs", "list", "--json", "--database", database_url).stdout)["runs"]
    }
    assert as_json[dead]["worker_heartbeat_lost_s"] > 0.2 and as_json[dead]["stuck"] is False
    assert as_json[alive]["worker_heartbeat_lost_s"] is None
