"""`tidegate doctor` and `GET /api/v1/doctor` (engine/operators/doctor.py), on both backends where a store is
involved: a healthy store, a dead worker with queued runs, an unconfigured pool, a skewed clock
(the injected one) and an unreachable database (a closed local port)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tests.apps.api import local_client
from tidegate import App, Executor, Workflow
from tidegate.cli.main import app as cli
from tidegate.domain.doctor import Diagnosis, Level
from tidegate.domain.model import WorkerRegistration
from tidegate.engine.operators.doctor import diagnose

CLOSED = "postgresql://postgres@127.0.0.1:1/test"  # nothing listens on port 1: refused at once
WEEK = 7 * 86400.0


def findings(diagnosis: Diagnosis) -> dict[str, tuple[Level, str]]:
    return {finding.check: (finding.level, finding.message) for finding in diagnosis.findings}


def examine(app: App) -> dict[str, tuple[Level, str]]:
    return findings(diagnose(lambda: app.store, app.clock, WEEK))


def test_a_healthy_store_passes_on_every_face(app, start_worker, database_url):
    @app.task(name="doc.ok", queue="doc")
    def ok() -> None: ...

    start_worker(queues=["doc"])
    ok.submit()
    printed = CliRunner().invoke(cli, ["doctor", "--json", "--database", database_url])
    answer = local_client(app.asgi()).get("/api/v1/doctor")
    assert answer.status_code == 200, answer.text
    for document in (json.loads(printed.stdout), answer.json()):
        levels = {finding["check"]: finding["level"] for finding in document["findings"]}
        # the server's connection count is shared with every other test: only its failure would be ours
        assert levels.pop("connections") != "fail"
        assert set(levels.values()) == {"pass"}, document
        assert list(levels) == [
            "store",
            "schema",
            "clock",
            "workers",
            "queues",
            "pools",
            "stuck",
            "schedules",
            "retention",
        ]
    assert printed.exit_code in (0, 1)  # 1 only when the shared server's connections are nearly all open
    workers = findings(diagnose(lambda: app.store, app.clock, WEEK))["workers"][1]
    assert "1 live worker(s)" in workers and "(doc)" in workers


def test_a_dead_worker_leaves_its_queued_runs_unserved(app, clock, backend):
    @app.task(name="doc.later", queue="mail")
    def later() -> None: ...

    app.store.register_worker(WorkerRegistration("gone-host:4242:abcd", 4, ["mail"], False, 30))
    later.submit()
    later.submit()
    assert examine(app)["queues"][0] is Level.PASS  # its worker is live: served
    clock.advance(120)  # its heartbeat stopped long ago
    seen = examine(app)
    assert seen["workers"] == (Level.WARN, "no live worker: nothing runs until one starts ('tidegate worker')")
    assert seen["queues"] == (Level.WARN, "queued runs that no live worker serves: mail (2 queued)")
    # On PostgreSQL the moved test clock is this host's clock ahead of the server's: a skew too.
    flagged = {check for check, (level, _) in seen.items() if level is not Level.PASS}
    assert flagged == {"workers", "queues"} | ({"clock"} if backend == "postgres" else set())
    if backend == "sqlite":
        diagnosis = diagnose(lambda: app.store, app.clock, WEEK)
        assert diagnosis.level is Level.WARN and diagnosis.exit_code == 1


def test_a_pool_steps_ask_for_but_nobody_configured(tidegate_app, tidegate_drain):
    app = tidegate_app

    @app.step(pool="gpu")
    def render() -> int:
        return 1

    @app.workflow(name="doc.flow", executor=Executor.in_process())
    def flow(wf: Workflow):
        return wf.step(render)

    flow.submit()
    assert tidegate_drain(app).completed == 1  # an unconfigured pool is unlimited: the step ran
    level, message = examine(app)["pools"]
    assert level is Level.WARN and "never configured (unlimited): gpu;" in message
    app.set_pool_limit("gpu", 2)
    assert examine(app)["pools"][0] is Level.PASS


def test_a_skewed_host_clock(app, clock, backend):
    assert app.store is not None  # opened before the clock moves, as a long-lived process's is
    clock.advance(5)
    small = examine(app)["clock"]
    clock.advance(600)
    large = examine(app)["clock"]
    if backend == "sqlite":  # every process stamps with its own clock: nothing to compare
        assert small == large == (Level.PASS, "SQLite has no clock of its own: each process stamps with its host's")
        return
    assert small[0] is Level.WARN and small[1].startswith("this host's clock is 5s ahead of the database's")
    assert large[0] is Level.FAIL and large[1].startswith("this host's clock is 10m5s ahead of the database's")


def test_an_unreachable_database_is_one_failing_finding():
    printed = CliRunner().invoke(cli, ["doctor", "--database", CLOSED])
    assert printed.exit_code == 2
    assert printed.stdout.startswith("fail  store        the store cannot be reached: cannot connect to PostgreSQL")
    as_json = CliRunner().invoke(cli, ["doctor", "--json", "--database", CLOSED])
    document = json.loads(as_json.stdout)
    assert document["level"] == "fail" and [finding["check"] for finding in document["findings"]] == ["store"]
    answer = local_client(App(CLOSED).asgi()).get("/api/v1/doctor")
    assert answer.status_code == 200 and answer.json()["findings"] == document["findings"]


def test_a_missing_sqlite_file_is_not_created(tmp_path):
    printed = CliRunner().invoke(cli, ["doctor", "--database", f"sqlite:///{tmp_path}/nowhere.db"])
    assert printed.exit_code == 2 and "no database at" in printed.stdout
    assert not (tmp_path / "nowhere.db").exists()
