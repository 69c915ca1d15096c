"""The dashboard in Chromium, against a live `tidegate serve` and a worker process (SQLite, PostgreSQL).

Each test sets the scene through the library (runs held on gate files), reads
the page as an operator would, then changes the world (opens a gate, presses
a button) and checks the page follows by itself, without a reload.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import FULL_TOKEN, READ_TOKEN, Console, Site, shoot, signed_in
from tests.conftest import wait_until
from tidegate import RunStatus

pytestmark = pytest.mark.browser
LIVE = 15_000  # ms a live update may take on a loaded machine (the stream refreshes in well under 1 s)
RED = "rgb(220, 38, 38)"


def submit(site: Site, task: str, **options: Any) -> tuple[str, str]:
    """Submit one held run of `task`; its id and its gate."""
    gate = site.gate()
    args = {"gate": gate, **({"n": options.pop("n")} if "n" in options else {})}
    handle = site.app.tasks[task].options(**options).submit(**args)
    return handle.id, gate


def status(site: Site, run_id: str) -> RunStatus:
    record = site.app.store.get_run(run_id)
    assert record is not None
    return record.status


def running(site: Site, run_id: str) -> None:
    wait_until(lambda: status(site, run_id) is RunStatus.RUNNING, message=f"{run_id} to run")


def blocked(site: Site, run_id: str) -> None:
    wait_until(lambda: (site.app.store.get_run(run_id) or None) and site.app.store.get_run(run_id).block_reason,
               message=f"{run_id} to be blocked")  # fmt: skip


@pytest.fixture(autouse=True)
def drained(site: Site) -> Iterator[None]:
    """After each test, pass or fail: open every gate and wait until nothing is queued, running or
    waiting, so the next test on this server starts clean (a failure must not fill the next test's limits)."""
    yield
    site.open_all()

    def idle() -> bool:
        counts = site.app.store.status_counts()
        return all(counts[status] == 0 for status in (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING))

    wait_until(idle, message="every run to end")


def gpu_claimed(site: Site) -> int:
    return next(pool.claimed for pool in site.app.store.pools() if pool.name == "gpu")


def test_queue_lists_blocked_runs_in_claim_order_and_a_dequeued_run_leaves_without_reload(
    operator: Any, site: Site
) -> None:
    first, first_gate = submit(site, "gated.hold")
    running(site, first)
    tenants = ["acme", "globex", "initech", "umbrella", "hooli", "stark"]
    priorities = [0, 5, 2, 0, 2, 1]
    waiting = [
        submit(site, "gated.hold", priority=priority, tags={"tenant": tenant})[0]
        for priority, tenant in zip(priorities, tenants, strict=True)
    ]
    for run_id in waiting:
        blocked(site, run_id)
    order = [run_id for _, _, run_id in sorted(zip([-p for p in priorities], range(6), waiting, strict=True))]

    operator.goto(f"{site.base}/queue?queue=gated")
    rows = operator.locator("tr[data-run]")
    expect(rows).to_have_count(6)
    assert [rows.nth(i).get_attribute("data-run") for i in range(6)] == order  # priority, then age
    for run_id in waiting:
        expect(operator.locator(f'tr[data-run="{run_id}"] td.reason')).to_contain_text("queue:gated full (1/1)")
    shoot(operator, site, "queue")
    operator.set_viewport_size({"width": 1280, "height": 300})
    operator.evaluate("window.scrollTo(0, 120)")
    scrolled = operator.evaluate("window.scrollY")
    operator.evaluate("window.__same_page = true")

    site.open_gate(first_gate)  # the holder ends: the head of the queue is dequeued
    expect(operator.locator(f'tr[data-run="{order[0]}"]')).to_have_count(0, timeout=LIVE)
    expect(rows).to_have_count(5)
    assert operator.evaluate("window.__same_page") is True  # updated in place, not reloaded
    assert scrolled > 0 and operator.evaluate("window.scrollY") == scrolled  # the scroll is kept
    expect(operator.locator("#q-queue")).to_have_value("gated")  # the filter is kept


def test_pools_shows_a_full_pool_in_red_with_its_holders_and_follows_a_release(operator: Any, site: Site) -> None:
    jobs = [submit(site, "gpu.job", n=n) for n in range(3)]
    wait_until(lambda: gpu_claimed(site) == 3, message="three gpu slots claimed")

    operator.goto(f"{site.base}/pools")
    card = operator.locator('[data-pool="gpu"]')
    expect(card.locator('[data-testid="claimed"]')).to_have_text("3/3")
    expect(card.locator(".bar")).to_have_attribute("data-level", "full")
    expect(card.locator(".bar > span")).to_have_css("background-color", RED)  # retried: a live swap may replace it
    holders = card.locator("tr[data-holder]")
    expect(holders).to_have_count(3)
    assert {holders.nth(i).get_attribute("data-holder") for i in range(3)} == {run_id for run_id, _ in jobs}
    shoot(operator, site, "pools")

    released, gate = jobs[0]
    site.open_gate(gate)
    expect(holders).to_have_count(2, timeout=LIVE)
    expect(card.locator('[data-testid="claimed"]')).to_have_text("2/3")
    expect(card.locator(".bar")).to_have_attribute("data-level", "warn")
    expect(card.locator(f'tr[data-holder="{released}"]')).to_have_count(0)


def test_run_tabs_show_queue_and_slot_events_and_why_names_the_scope_and_its_holders(operator: Any, site: Site) -> None:
    holders = [submit(site, "gpu.job", n=n) for n in range(3)]
    wait_until(lambda: gpu_claimed(site) == 3, message="three gpu slots claimed")
    waiter, _ = submit(site, "gpu.job", n=9)
    wait_until(lambda: any(step.waiting_for for step in site.app.store.run_steps(waiter)), message="a step waiting")
    site.open_gate(holders[0][1])  # a slot frees: the waiting step claims it
    wait_until(lambda: any(e.type == "StepSlotClaimed" for e in site.app.store.run_events(waiter)), message="claim")

    operator.goto(f"{site.base}/runs/{waiter}?tab=concurrency")
    for kind in ("RunQueued", "RunDequeued", "StepSlotWaiting", "StepSlotClaimed"):
        expect(operator.locator(f'li[data-event="{kind}"]').first).to_be_visible()
    expect(operator.locator('li[data-event="StepSlotWaiting"]').first).to_contain_text("pool:gpu")
    shoot(operator, site, "run-concurrency")

    first, _ = submit(site, "gated.hold")
    running(site, first)
    queued, _ = submit(site, "gated.hold")
    blocked(site, queued)
    operator.goto(f"{site.base}/runs/{queued}?tab=why")
    expect(operator.locator('[data-testid="blocked-by"]')).to_have_text("queue:gated")
    expect(operator.locator(".holders-row")).to_contain_text(first)
    shoot(operator, site, "run-why")


def test_setting_a_limit_previews_the_runs_it_unblocks_then_stores_it_with_its_audit_row(
    operator: Any, site: Site
) -> None:
    first, _ = submit(site, "trickle.hold")
    running(site, first)
    waiting = [submit(site, "trickle.hold")[0] for _ in range(2)]
    for run_id in waiting:
        blocked(site, run_id)

    operator.goto(f"{site.base}/limits")
    operator.get_by_label("Target").fill("queue:trickle")
    operator.get_by_label("Limit", exact=True).fill("3")
    operator.get_by_role("button", name="Preview", exact=True).click()
    expect(operator.locator('[data-testid="unblocks"]')).to_have_text("unblocks 2 queued runs")
    assert "queue:trickle" not in site.app.store.rules().overrides  # a preview changes nothing
    state = operator.locator("[data-live-state]")
    expect(state).to_have_text("Not live (a form's answer)")
    dot = state.evaluate("element => getComputedStyle(element, '::before').backgroundColor")
    assert dot == "rgb(91, 101, 114)"  # grey (--muted), not the green of a live page: nothing refreshes here
    shoot(operator, site, "limits-preview")

    operator.get_by_role("button", name="Confirm").click()
    operator.wait_for_url(f"{site.base}/limits")
    assert site.app.store.rules().overrides["queue:trickle"] == 3
    audit = site.app.store.latest_events("LimitChanged", 1)[0]
    assert (audit.metadata["target"], audit.metadata["old"], audit.metadata["new"]) == ("queue:trickle", 1, 3)
    expect(operator.locator('[data-testid="history"] tbody tr').first).to_contain_text("queue:trickle")
    for run_id in waiting:
        running(site, run_id)  # the new limit lets them start
    shoot(operator, site, "limits")


def test_a_read_only_token_sees_no_control_and_a_forged_request_is_refused(
    browser: Any, site: Site, console: Console
) -> None:
    first, _ = submit(site, "gated.hold")
    running(site, first)
    queued, _ = submit(site, "gated.hold")
    blocked(site, queued)
    before = site.app.store.rules().overrides

    viewer = signed_in(browser, site, READ_TOKEN, console)
    for path in ("/queue", "/pools", "/limits", f"/runs/{queued}", f"/runs/{first}"):
        viewer.goto(f"{site.base}{path}")
        expect(viewer.locator("text=read-only")).to_be_visible()
        expect(viewer.locator('form[method="post"]:not(.logout)')).to_have_count(0)
    viewer.goto(f"{site.base}/queue")
    shoot(viewer, site, "queue-read-only")
    forged = viewer.request.post(f"{site.base}/limits/set", form={"target": "queue:gated", "limit": "9"})
    assert forged.status == 403  # a read token may not change, whatever the form carries
    canceled = viewer.request.post(f"{site.base}/queue/cancel", form={"run_id": queued})
    assert canceled.status == 403
    viewer.context.close()

    operator = signed_in(browser, site, FULL_TOKEN, console)
    no_token = operator.request.post(f"{site.base}/limits/set", form={"target": "queue:gated", "limit": "9"})
    assert no_token.status == 403  # a full session, but no form token: what another site's form would send
    cross_site = operator.request.post(
        f"{site.base}/queue/cancel", form={"run_id": queued, "form_token": "guess"},
        headers={"Origin": "http://evil.example"},
    )  # fmt: skip
    assert cross_site.status == 403
    operator.context.close()
    assert site.app.store.rules().overrides == before
    assert status(site, queued) is RunStatus.QUEUED
    assert console.errors == []


def test_without_the_event_stream_a_page_refreshes_every_5_seconds(browser: Any, site: Site) -> None:
    first, gate = submit(site, "gated.hold")
    running(site, first)
    queued, _ = submit(site, "gated.hold")
    blocked(site, queued)
    viewer = signed_in(browser, site, READ_TOKEN, Console())  # the refused stream is logged: not asserted here
    viewer.route("**/live/events", lambda route: route.fulfill(status=503, body="stream refused"))
    viewer.goto(f"{site.base}/queue?queue=gated")
    expect(viewer.locator("[data-live-state]")).to_have_text("Refreshing every 5 s")
    expect(viewer.locator(f'tr[data-run="{queued}"]')).to_have_count(1)
    viewer.evaluate("window.__same_page = true")
    site.open_gate(gate)
    expect(viewer.locator(f'tr[data-run="{queued}"]')).to_have_count(0, timeout=LIVE)
    assert viewer.evaluate("window.__same_page") is True
    viewer.context.close()


def test_every_page_renders_live_without_console_errors(operator: Any, site: Site) -> None:
    first, _ = submit(site, "gated.hold", tags={"tenant": "acme"})
    running(site, first)
    queued, _ = submit(site, "gated.hold", priority=3)
    blocked(site, queued)
    held = [submit(site, "gpu.job", n=n) for n in range(2)]
    wait_until(lambda: gpu_claimed(site) == 2, message="two gpu slots claimed")
    pages = {
        "overview": "/", "queue-all": "/queue", "pools-live": "/pools", "runs": "/runs", "limits-all": "/limits",
        "workers": "/workers", "schedules": "/schedules", "run-overview": f"/runs/{first}",
        "run-steps": f"/runs/{held[0][0]}?tab=steps",
        "run-events": f"/runs/{first}?tab=events",
    }  # fmt: skip
    for name, path in pages.items():
        operator.goto(f"{site.base}{path}")
        expect(operator.locator("h1")).to_be_visible()
        shoot(operator, site, name)
    expect(operator.locator("[data-live-state]")).to_have_text("Live")  # the event stream is followed
    operator.goto(f"{site.base}/schedules")  # the worker stored the app's schedule: pause it, then resume
    row = operator.locator('tr[data-schedule="new-year"]')
    row.get_by_role("button", name="Pause").click()
    expect(row.locator('[data-testid="state"]')).to_have_text("paused")
    shoot(operator, site, "schedules-paused")
    row.get_by_role("button", name="Resume").click()
    expect(row.locator('[data-testid="state"]')).to_have_text("active")
    operator.set_viewport_size({"width": 390, "height": 844})
    for name, path in (("queue-narrow", "/queue"), ("pools-narrow", "/pools")):
        operator.goto(f"{site.base}{path}")
        shoot(operator, site, name)


def test_a_waiting_parent_shows_its_child_and_what_it_released_and_follows_the_child_to_the_end(
    operator: Any, site: Site
) -> None:
    parent, gate = submit(site, "family.parent")
    wait_until(lambda: status(site, parent) is RunStatus.WAITING, message="the parent to wait")
    (child,) = site.app.store.run_children(parent)
    running(site, child.id)

    operator.goto(f"{site.base}/runs/{parent}")
    badge = operator.locator(".header-grid .badge.s-waiting")
    expect(badge).to_have_text("waiting")
    running_colour = operator.evaluate(
        "() => { const b = document.createElement('span'); b.className = 'badge s-running';"
        " document.body.append(b); const c = getComputedStyle(b).backgroundColor; b.remove(); return c; }"
    )
    assert running_colour.startswith("rgb")
    expect(badge).not_to_have_css("background-color", running_colour)  # waiting has a style of its own
    waits = operator.locator('[data-testid="waits"]')
    expect(waits).to_contain_text("1 child (1 running)")
    expect(waits.locator(".chip.released")).to_have_text("queue:family")
    shoot(operator, site, "run-waiting")

    operator.locator("nav.tabs").get_by_role("link", name="Children").click()
    row = operator.locator(f'tr[data-child="{child.id}"]')
    expect(row.locator(".badge[class*=s-]")).to_have_text("running")
    expect(row.locator("td").first).to_have_text("0")
    shoot(operator, site, "run-children")
    row.get_by_role("link", name=child.id).click()
    expect(operator.locator('[data-testid="parent"] a')).to_have_text(parent)
    expect(operator.locator('[data-testid="depth"]')).to_have_text("1")
    shoot(operator, site, "run-child")

    operator.goto(f"{site.base}/runs?status=waiting")
    expect(operator.locator("select[name=status]")).to_have_value("waiting")
    expect(operator.locator(f'a[href="/runs/{parent}"]')).to_have_count(1)

    operator.goto(f"{site.base}/runs/{parent}?tab=children")
    site.open_gate(gate)  # the child ends, the parent resumes and completes: the page follows
    expect(row.locator(".badge[class*=s-]")).to_have_text("completed", timeout=LIVE)
    expect(operator.locator(".header-grid .badge").first).to_have_text("completed", timeout=LIVE)


def test_a_retry_past_the_ceiling_is_explained_on_the_page_and_a_later_one_is_taken(
    operator: Any, site: Site, console: Console
) -> None:
    failed, _ = submit(site, "capped.boom")
    wait_until(lambda: status(site, failed) is RunStatus.FAILED, message="the run to fail")
    holder, gate = submit(site, "capped.hold")  # the one active run the ceiling admits
    running(site, holder)

    operator.goto(f"{site.base}/runs/{failed}")
    operator.get_by_role("button", name="Retry").click()
    alert = operator.locator('[role="alert"]')
    expect(alert).to_contain_text("The retry was refused: admission ceiling reached for")
    expect(operator).to_have_url(f"{site.base}/runs/{failed}")  # the page's own address, reloadable
    assert status(site, failed) is RunStatus.FAILED
    shoot(operator, site, "run-retry-refused")
    answered = "Failed to load resource: the server responded with a status of 429 (Too Many Requests)"
    assert console.errors == [answered]  # the page's own status (429, as the API answers), logged by Chromium
    console.errors.clear()

    site.open_gate(gate)
    wait_until(lambda: status(site, holder) is RunStatus.COMPLETED, message="the holder to end")
    operator.reload()
    operator.get_by_role("button", name="Retry").click()
    wait_until(lambda: site.app.store.get_run(failed).attempt == 2, message="the retry to be taken")
    expect(operator.locator('[role="alert"]')).to_have_count(0)


def test_the_api_docs_render_with_no_other_site_reachable(browser: Any, site: Site) -> None:
    """Every request to a host other than this server is aborted: the docs must still list the operations,
    and the page must not even try another site (Swagger UI is served from the package, no CDN)."""
    context = browser.new_context(extra_http_headers={"Authorization": f"Bearer {READ_TOKEN}"})
    elsewhere: list[str] = []

    def only_here(route: Any) -> None:
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    context.route("**/*", only_here)
    page = context.new_page()
    console = Console()
    console.watch(page)
    page.goto(f"{site.base}/api/docs")
    expect(page.locator(".opblock-summary-path", has_text="/api/v1/runs/{run_id}/cancel")).to_be_visible(timeout=LIVE)
    assert page.locator(".opblock").count() >= 20  # every operation, not an error box
    shoot(page, site, "api-docs")
    context.close()
    assert elsewhere == []
    assert console.errors == []  # nothing the policy refused (an inline script, an eval) nor a missing file
