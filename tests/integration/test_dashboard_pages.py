"""The dashboard's pages and forms through the ASGI app (no browser), on both backends.

What the browser tests cannot cheaply cover: sign-in, each form's effect on the
store (and that a refused one changes nothing), paging and filters, and links
under a mount prefix. Pages are asked as a browser asks (cookie, form body).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.apps.dashboard_tasks import make_app
from tests.conftest import wait_status
from tidegate import App, RunStatus
from tidegate.api import Tokens, create_api
from tidegate.domain.model import CycleRequest, WorkerRegistration
from tidegate.domain.steps import StepStatus, StepUpdate

FULL, READ = "full-token", "read-token"
FORM_TOKEN = re.compile(r'name="form_token" value="([0-9a-f]+)"')


@pytest.fixture
def served(database_url: str) -> Iterator[App]:
    app = make_app(database_url)
    app.set_pool_limit("gpu", 3)
    app.enqueue([])
    try:
        yield app
    finally:
        app.close()


def client(app: App, token: str | None = None, tokens: Tokens | None = None) -> TestClient:
    browser = TestClient(create_api(app, tokens=tokens or Tokens(FULL, READ)), base_url="http://127.0.0.1")
    if token is not None:
        signed = browser.post("/login", data={"token": token, "next": "/pools"}, follow_redirects=False)
        assert signed.status_code == 303 and signed.headers["location"] == "/pools"
    return browser


def form_token(browser: TestClient, path: str) -> str:
    found = FORM_TOKEN.search(browser.get(path).text)
    assert found, f"no form on {path}"
    return found.group(1)


def test_a_page_without_a_token_sends_to_sign_in_and_a_wrong_token_is_refused(served: App) -> None:
    browser = client(served)
    asked = browser.get("/queue?queue=gated", follow_redirects=False)
    assert asked.status_code == 303 and asked.headers["location"] == "/login?next=/queue%3Fqueue%3Dgated"
    wrong = browser.post("/login", data={"token": "nope", "next": "/queue"})
    assert wrong.status_code == 401 and "not valid" in wrong.text
    assert browser.get("/queue", follow_redirects=False).status_code == 303
    offsite = browser.post("/login", data={"token": FULL, "next": "//evil.example/x"}, follow_redirects=False)
    assert offsite.headers["location"] == "/"  # never sent to another site after signing in


def test_without_tokens_pages_answer_loopback_without_sign_in(served: App) -> None:
    browser = client(served, tokens=Tokens())
    assert browser.get("/queue").status_code == 200
    assert browser.get("/login", follow_redirects=False).headers["location"] == "/"
    remote = TestClient(create_api(served, tokens=Tokens()), base_url="http://tidegate.example")
    assert remote.get("/queue").status_code == 403  # the API's own rule: tokenless answers loopback only


def test_the_pool_form_sets_limit_and_lease_and_a_bad_value_changes_nothing(served: App) -> None:
    browser = client(served, FULL)
    token = form_token(browser, "/pools")
    done = browser.post("/pools/gpu", data={"form_token": token, "limit": "5", "lease": "45s"}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/pools"
    (gpu,) = [pool for pool in served.store.pools() if pool.name == "gpu"]
    assert (gpu.limit, gpu.lease_seconds) == (5, 45.0)
    bad = browser.post("/pools/gpu", data={"form_token": token, "limit": "-1", "lease": "45s"})
    assert bad.status_code == 422 and "pool gpu:" in bad.text and 'role="alert"' in bad.text
    assert [pool.limit for pool in served.store.pools() if pool.name == "gpu"] == [5]


def test_pausing_a_queue_from_limits_is_stored_and_audited(served: App) -> None:
    browser = client(served, FULL)
    token = form_token(browser, "/limits")
    browser.post("/queues/gated/pause", data={"form_token": token})
    assert served.store.rules().is_paused("gated")
    assert served.store.latest_events("LimitChanged", 1)[0].metadata == {"target": "queue:gated", "paused": True}
    assert "Resume" in browser.get("/limits").text
    browser.post("/queues/gated/resume", data={"form_token": token})
    assert not served.store.rules().is_paused("gated")


def test_a_read_token_gets_no_form_and_every_post_is_refused(served: App) -> None:
    run = served.tasks["gated.hold"].submit(gate="/nonexistent")
    viewer = client(served, READ)
    full = client(served, FULL)
    token = form_token(full, "/limits")  # even a real form token does not lift a read grant
    for path in ("/", "/queue", "/pools", "/limits", "/runs", "/workers", f"/runs/{run.id}"):
        page = viewer.get(path)
        assert page.status_code == 200 and "form_token" not in page.text, path
    attempts = {
        "/limits/set": {"target": "queue:gated", "limit": "5"},
        "/limits/reset": {"target": "queue:gated"},
        "/pools/gpu": {"limit": "9"},
        "/queue/cancel": {"run_id": run.id},
        "/queues/gated/pause": {},
        f"/runs/{run.id}/cancel": {},
        f"/runs/{run.id}/retry": {},
        "/schedules/new-year/pause": {},
    }
    for path, fields in attempts.items():
        assert viewer.post(path, data={**fields, "form_token": token}).status_code == 403, path
        assert full.post(path, data=fields).status_code == 403, path  # no form token: a forged form
    assert served.store.rules().overrides == {}
    assert served.store.get_run(run.id).status is RunStatus.QUEUED
    assert [pool.limit for pool in served.store.pools() if pool.name == "gpu"] == [3]


@pytest.mark.parametrize("origin", ["http://127.0.0.1:3000", "https://127.0.0.1", "null"])
def test_a_form_from_another_origins_page_is_refused_even_with_its_form_token(served: App, origin: str) -> None:
    run = served.tasks["gated.hold"].submit(gate="/nonexistent")
    browser = client(served, FULL)
    token = form_token(browser, "/queue")
    refused = browser.post("/queue/cancel", data={"run_id": run.id, "form_token": token}, headers={"Origin": origin})
    assert refused.status_code == 403 and "not of this server" in refused.json()["detail"]
    assert browser.post("/logout", headers={"Origin": origin}).status_code == 403  # nor sign this browser out
    assert served.store.get_run(run.id).status is RunStatus.QUEUED
    own = {"Origin": "http://127.0.0.1"}
    assert browser.post("/queue/cancel", data={"run_id": run.id, "form_token": token}, headers=own).status_code == 200
    assert served.store.get_run(run.id).status is RunStatus.CANCELED


def test_runs_are_paged_newest_first_and_filtered(served: App) -> None:
    ids = [handle.id for handle in served.tasks["trickle.hold"].submit_many([{"gate": f"/g{n}"} for n in range(53)])]
    tagged = served.tasks["gated.hold"].options(tags={"tenant": "acme"}).submit(gate="/g")
    browser = client(served, FULL)
    first = browser.get("/runs").text
    listed = re.findall(r'<td><a class="mono" href="/runs/([0-9A-Z]+)"', first)
    assert len(listed) == 50 and listed[0] == tagged.id
    older = re.search(r'href="/runs\?([^"]*before=[^"]+)" rel="next"', first)
    assert older
    rest = re.findall(r'<td><a class="mono" href="/runs/([0-9A-Z]+)"', browser.get(f"/runs?{older.group(1)}").text)
    assert len(rest) == 4 and set(listed[1:] + rest) == set(ids)
    by_tag = browser.get("/runs?tag=tenant%3Dacme").text
    assert re.findall(r'<td><a class="mono" href="/runs/([0-9A-Z]+)"', by_tag) == [tagged.id]
    assert browser.get("/runs?status=bogus").status_code == 422


def test_links_keep_the_prefix_the_api_is_mounted_at(served: App) -> None:
    outer = FastAPI()
    outer.mount("/ops", create_api(served, tokens=Tokens()))
    page = TestClient(outer, base_url="http://127.0.0.1").get("/ops/queue")
    assert page.status_code == 200
    assert 'href="/ops/pools"' in page.text and 'href="/ops/static/dashboard.css"' in page.text
    assert 'data-stream="/ops/live/events"' in page.text


def test_overview_and_workers_show_the_overflow_signal_a_worker_raised(served: App) -> None:
    browser = client(served, READ)
    assert "No overflow signal raised" in browser.get("/").text
    store = served.store
    store.register_worker(WorkerRegistration("w1", 1, ["trickle"], False, 60))
    served.tasks["trickle.hold"].submit_many([{"gate": "/a"}, {"gate": "/b"}])
    served.store.set_limit("queue:trickle", 5)  # the waiting run is one the limits would admit
    assert len(store.cycle(CycleRequest("w1", ["trickle"], [], [], 1, 30.0)).claimed) == 1
    assert store.check_overflow("w1", ["trickle"], 60) == 1
    for path in ("/", "/workers"):
        shown = browser.get(path).text
        assert 'role="alert" data-testid="overflow">Overflow' in shown, path
        assert "1 runs the limits would admit waited" in shown, path


def test_pages_are_not_cached_or_framed_and_an_unknown_run_is_a_404_page(served: App) -> None:
    browser = client(served, READ)
    page = browser.get("/runs/01NOSUCHRUN")
    assert page.status_code == 404 and "No run 01NOSUCHRUN" in page.text
    assert page.headers["cache-control"] == "no-store" and page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]


def test_a_reset_is_previewed_then_confirmed_and_audited(served: App) -> None:
    served.store.set_limit("queue:trickle", 4)
    browser = client(served, FULL)
    token = form_token(browser, "/limits")
    assert 'name="reset" value="1"' in browser.get("/limits").text  # the row's Reset opens a preview
    preview = browser.post("/limits/preview", data={"form_token": token, "target": "queue:trickle", "reset": "1"})
    assert "Reset <strong>queue:trickle</strong> to the code" in preview.text and "4 → 1" in preview.text
    assert 'action="/limits/reset"' in preview.text
    assert " data-answer>" in preview.text  # a form's answer: the page does not refresh itself (a GET would 405)
    assert served.store.rules().overrides == {"queue:trickle": 4}  # a preview changes nothing
    browser.post("/limits/reset", data={"form_token": token, "target": "queue:trickle"})
    assert served.store.rules().overrides == {}
    (audit,) = served.store.latest_events("LimitChanged", 1)
    assert (audit.metadata["target"], audit.metadata["reset"], audit.metadata["new"]) == ("queue:trickle", True, 1)


def test_a_waiting_parent_shows_what_it_waits_for_and_its_children_link_back(
    served: App, start_worker, tmp_path
) -> None:
    gate = tmp_path / "gate"
    parent = served.tasks["family.parent"].submit(gate=str(gate))
    start_worker(served, max_workers=2, queues=["family"])
    wait_status(served, parent.id, RunStatus.WAITING)
    (child,) = served.store.run_children(parent.id)
    wait_status(served, child.id, RunStatus.RUNNING)
    browser = client(served, FULL)
    try:
        shown = browser.get(f"/runs/{parent.id}").text
        assert '<span class="badge s-waiting">waiting</span>' in shown
        waits = shown[shown.index('data-testid="waits"') :]
        assert "1 child (1 running)" in waits and '<span class="chip released">queue:family</span>' in waits
        assert "queued again once they have all ended" in waits  # a task's wait, not a window (any)
        assert "queued again once they have all ended" in browser.get(f"/runs/{parent.id}?tab=why").text
        assert f"/runs/{parent.id}/cancel" in shown  # a waiting run can be canceled (its children with it)
        children = browser.get(f"/runs/{parent.id}?tab=children").text
        row = re.search(rf'<tr data-child="{child.id}">(.*?)</tr>', children, re.S)
        assert row and '<td class="num">0</td>' in row.group(1) and "family.child" in row.group(1)
        assert "s-running" in row.group(1) and f'href="/runs/{child.id}"' in row.group(1)
        below = browser.get(f"/runs/{child.id}").text
        parent_link = f'<a class="mono" href="/runs/{parent.id}">{parent.id}</a>'
        assert f'<span data-testid="parent">{parent_link}</span>' in below
        assert f'<span data-testid="root">{parent_link}</span>' in below
        assert '<span data-testid="depth">1</span>' in below
        listed = browser.get("/runs?status=waiting").text
        assert re.findall(r'<td><a class="mono" href="/runs/([0-9A-Z]+)"', listed) == [parent.id]
        assert "<option selected>waiting</option>" in listed
        assert '<a href="/runs?status=waiting">1</a>' in browser.get("/").text
    finally:
        gate.touch()
    wait_status(served, parent.id, RunStatus.COMPLETED)


def test_a_refused_retry_or_cancel_is_shown_on_the_run_page_and_changes_nothing(served: App) -> None:
    failed = served.tasks["capped.boom"].submit(gate="-")
    served.store.cancel_run(failed.id)  # canceled while queued: an operator may retry it
    holder = served.tasks["capped.hold"].submit(gate="/nonexistent")  # the ceiling's one active run
    browser = client(served, FULL)
    token = form_token(browser, f"/runs/{failed.id}")
    assert f'action="/runs/{failed.id}/retry"' in browser.get(f"/runs/{failed.id}").text
    refused = browser.post(f"/runs/{failed.id}/retry", data={"form_token": token})
    assert refused.status_code == 429 and 'role="alert"' in refused.text
    assert "The retry was refused: admission ceiling reached for" in refused.text
    assert f'data-canonical="/runs/{failed.id}"' in refused.text  # the page names its own address
    assert served.store.get_run(failed.id).status is RunStatus.CANCELED
    again = browser.post(f"/runs/{holder.id}/retry", data={"form_token": token})  # queued: not retryable
    assert again.status_code == 409 and "The retry was refused:" in again.text
    served.store.cancel_run(holder.id)  # room again: the retry is taken
    done = browser.post(f"/runs/{failed.id}/retry", data={"form_token": token}, follow_redirects=False)
    assert done.status_code == 303 and served.store.get_run(failed.id).status is RunStatus.QUEUED


def test_a_kubernetes_steps_job_and_pod_are_shown_on_the_steps_and_concurrency_tabs(served: App) -> None:
    run = served.tasks["gpu.job"].submit(n=1, gate="-")
    served.store.register_worker(WorkerRegistration("w1", 1, ["gpu"], False, 60))
    assert len(served.store.cycle(CycleRequest("w1", ["gpu"], [], [], 1, 30.0)).claimed) == 1  # attempt 1 runs
    fence = (run.id, 1)
    step = StepUpdate("render", StepStatus.RUNNING, output={"job": "tg-job-1", "pod": "tg-job-1-x7k", "output": 1},
                      details={"job": "tg-job-1", "pod": "tg-job-1-x7k"})  # fmt: skip
    assert served.store.record_steps(fence, [step])
    (written,) = [e for e in served.store.run_events(run.id) if e.type == "StepOutputWritten"]
    browser = client(served, READ)
    link = f'href="/runs/{run.id}?tab=events#event-{written.id}"'
    for tab in ("steps", "concurrency"):
        shown = browser.get(f"/runs/{run.id}?tab={tab}").text
        assert f'<a class="chip" {link}' in shown and "job/tg-job-1</a>" in shown and "pod/tg-job-1-x7k</a>" in shown
    assert f'<tr id="event-{written.id}">' in browser.get(f"/runs/{run.id}?tab=events").text


def test_schedules_are_listed_and_paused_then_resumed_by_a_full_token_only(served: App) -> None:
    served.resume_schedule("new-year")  # stores the declaration, as a worker's start does; nothing changes
    viewer = client(served, READ)
    listed = viewer.get("/schedules").text
    row = re.search(r'<tr data-schedule="new-year">(.*?)</tr>', listed, re.S)
    assert row and "trickle.hold" in row.group(1) and "0 3 1 1 *" in row.group(1) and "Europe/Paris" in row.group(1)
    assert '<time datetime="' in row.group(1) and ">active<" in row.group(1) and "form_token" not in listed
    browser = client(served, FULL)
    token = form_token(browser, "/schedules")
    assert viewer.post("/schedules/new-year/pause", data={"form_token": token}).status_code == 403
    assert not served.store.list_schedules()[0].paused
    done = browser.post("/schedules/new-year/pause", data={"form_token": token}, follow_redirects=False)
    assert done.status_code == 303 and served.store.list_schedules()[0].paused
    assert ">paused<" in browser.get("/schedules").text and ">Resume</button>" in browser.get("/schedules").text
    missing = browser.post("/schedules/nope/resume", data={"form_token": token})
    assert missing.status_code == 404 and 'role="alert"' in missing.text and "nope" in missing.text
    browser.post("/schedules/new-year/resume", data={"form_token": token})
    assert not served.store.list_schedules()[0].paused


def test_a_run_queued_while_its_scope_is_full_says_so_before_any_claim_reads_it(served: App) -> None:
    """A woken worker that finds every scope full looks and claims nothing (`peek_cycle`), so a
    run queued meanwhile has no stored block reason yet: its page says why it waits from the
    live usage, not "nothing blocks it"."""
    served.store.register_worker(WorkerRegistration("w1", 1, ["gated"], False, 60))
    first = served.tasks["gated.hold"].submit(gate="/never")
    assert [run.id for run in served.store.cycle(CycleRequest("w1", ["gated"], [], [], 1, 30.0)).claimed] == [first.id]
    second = served.tasks["gated.hold"].submit(gate="/never")
    assert served.store.get_run(second.id).block_reason is None  # no claim has read it
    shown = client(served, FULL).get(f"/runs/{second.id}").text
    assert "queue:gated full (1/1)" in shown and "nothing blocks it" not in shown
