"""`GET /metrics`: Prometheus text that a Prometheus parser reads, whose scope gauges are the holder rows.

While runs hold slots (a queue limit, a global cap and a per-tenant tag limit,
workers parked inside their tasks), the scrape's `tidegate_scope_slots_used`
of each scope must equal the sum of that scope's holder rows and
`tidegate_scope_slots_limit` the limit in force; the blocked gauge counts the
queued runs whose block reason names the scope; the run gauges count the
store's runs. The server's own counters see each submit, each 429 (by the
queue whose ceiling refused) and each request's latency by route and status.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.apps.api import local_client
from tests.conftest import REPO_ROOT, wait_until
from tidegate import App, Concurrency, RunQueueConfig, RunStatus, TagConcurrencyLimit
from tidegate.domain.scopes import effective_limit
from tidegate.engine.operators.why import explain

TENANT_LIMIT = TagConcurrencyLimit("tenant", limit=1, per_unique_value=True)


@pytest.fixture
def limited_app(database_url: str, clock) -> Iterator[App]:
    application = App(
        database_url,
        clock=clock,
        run_queue=RunQueueConfig(max_concurrent_runs=5, tag_concurrency_limits=[TENANT_LIMIT]),
    )
    try:
        yield application
    finally:
        application.close()


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape, keyed by (name, labels), as Prometheus itself would parse it."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _by_label(samples, name: str, label: str) -> dict[str, float]:
    return {dict(labels)[label]: value for (metric, labels), value in samples.items() if metric == name}


def test_metrics_scope_gauges_match_the_holder_rows_while_runs_hold_slots(limited_app: App, start_worker) -> None:
    app = limited_app
    gate = threading.Event()
    app.queue("metered", concurrency=Concurrency(global_limit=2))
    app.queue("capped", max_active=1)

    @app.task(name="metered", queue="metered")
    def metered(n: int) -> int:
        gate.wait(60)
        return n

    @app.task(name="capped", queue="capped")
    def capped() -> None:
        return None

    client = local_client(app.asgi())
    try:
        for n, tenant in enumerate(["a", "a", "b", "b", "c"]):
            body = {"task": "metered", "args": {"n": n}, "tags": {"tenant": tenant}}
            assert client.post("/api/v1/runs", json=body).status_code == 201
        assert client.post("/api/v1/runs", json={"task": "capped", "args": {}}).status_code == 201
        assert client.post("/api/v1/runs", json={"task": "capped", "args": {}}).status_code == 429
        start_worker(app, max_workers=4, queues=["metered"])
        wait_until(lambda: app.store.status_counts("metered")[RunStatus.RUNNING] == 2, message="2 runs hold slots")
        # The runs stay as they are (the gate holds the two running): the blocked gauges count the
        # queued runs by the scopes `queue why` names for each, whichever claim read them.
        scraped: dict[str, Any] = {}

        def scrape_agrees_with_why() -> bool:
            response = client.get("/metrics")
            assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
            scraped["samples"] = samples = _samples(response.text)
            blocked = _by_label(samples, "tidegate_scope_blocked_runs", "scope")
            queued = app.store.list_queued("metered")
            reasons = [check.scope for run in queued for check in explain(app.store, run.id).blocking]
            scraped["blocked"], scraped["reasons"] = blocked, reasons
            return len(queued) == 3 and blocked == {scope: reasons.count(scope) for scope in set(reasons)}

        wait_until(scrape_agrees_with_why, message="blocked gauges match what queue why says")
        samples = scraped["samples"]
        rules = app.store.rules()
        used = _by_label(samples, "tidegate_scope_slots_used", "scope")
        limits = _by_label(samples, "tidegate_scope_slots_limit", "scope")
        held = {scope: sum(h.slots for h in app.store.scope_holders(scope)) for scope in app.store.scope_usage()}
        assert set(held) == {"global", "queue:metered", "tag:tenant=a", "tag:tenant=b"}
        for scope, slots in held.items():
            assert used[scope] == slots, scope
            assert limits[scope] == effective_limit(rules, scope), scope
        assert (used["queue:metered"], limits["queue:metered"]) == (2, 2)
        assert (used["global"], limits["global"]) == (2, 5)

        blocked = scraped["blocked"]
        assert blocked["queue:metered"] >= 1

        runs = {(dict(labels)["queue"], dict(labels)["status"]): value
                for (name, labels), value in samples.items() if name == "tidegate_runs"}  # fmt: skip
        assert runs[("metered", "running")] == 2 and runs[("metered", "queued")] == 3
        assert runs[("capped", "queued")] == 1

        assert _by_label(samples, "tidegate_submitted_runs_total", "queue") == {"metered": 5, "capped": 1}
        assert _by_label(samples, "tidegate_admission_rejections_total", "queue") == {"capped": 1}
        latency = {
            (dict(labels)["method"], dict(labels)["route"], dict(labels)["status"]): value
            for (name, labels), value in samples.items()
            if name == "tidegate_http_request_duration_seconds_count"
        }
        assert latency[("POST", "/api/v1/runs", "201")] == 6
        assert latency[("POST", "/api/v1/runs", "429")] == 1
    finally:
        gate.set()


def test_metrics_follow_the_read_tokens(app: App) -> None:
    from tidegate.api import Tokens, create_api

    client = local_client(create_api(app, tokens=Tokens(full="writer", read="reader")))
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer reader"}).status_code == 200


def test_metrics_include_the_counters_of_a_worker_running_in_the_api_s_process(app: App, start_worker) -> None:
    """One registry story: an in-process worker's claims and run durations are on the API's /metrics."""

    @app.task(name="counted", queue="counted")
    def counted() -> None:
        return None

    client = local_client(app.asgi())

    def seen() -> tuple[float, float]:
        samples = _samples(client.get("/metrics").text)
        claimed = _by_label(samples, "tidegate_claimed_runs_total", "queue").get("counted", 0.0)
        durations = {
            dict(labels)["status"]: value
            for (metric, labels), value in samples.items()
            if metric == "tidegate_run_duration_seconds_count" and dict(labels).get("task") == "counted"
        }
        return claimed, durations.get("completed", 0.0)

    before = seen()  # the counters are process-wide: other tests of this process may have counted
    start_worker(queues=["counted"])
    handles = [counted.submit() for _ in range(3)]
    for handle in handles:
        handle.wait(timeout=30)
    wait_until(lambda: seen() == (before[0] + 3, before[1] + 3), message="the worker's metrics on /metrics")


SCRAPE = """
import sys
from tests.apps.api import local_client
from tidegate import App
app = App(sys.argv[1])
print(local_client(app.asgi()).get("/metrics").text)
app.close()
"""


def test_a_server_running_no_worker_exports_no_empty_family_and_no_created_series(database_url: str) -> None:
    """A fresh process, as `tidegate serve` is (this test process's counters may hold other tests' counts):
    no per-worker family is exported empty, and no counter doubles itself with a `_created` series."""
    scraped = subprocess.run(
        [sys.executable, "-c", SCRAPE, database_url], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout
    families = {family.name: family for family in text_string_to_metric_families(scraped)}
    per_worker = ("tidegate_claimed_runs", "tidegate_run_duration_seconds", "tidegate_queue_wait_seconds")
    assert [name for name in per_worker if name in families] == []  # were there with a HELP and no sample
    assert families["tidegate_capacity_overflow"].samples[0].value == 0  # a counter of this process: kept
    assert [s.name for family in families.values() for s in family.samples if s.name.endswith("_created")] == []
