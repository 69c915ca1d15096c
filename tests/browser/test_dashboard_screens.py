"""Every dashboard page at 1280 and 420 px: the column that answers the page's question is in view
without sideways scrolling, the run tabs and the nav are reachable, and axe-core finds no serious or
critical violation (and no moderate one that is not justified below), on SQLite and PostgreSQL.

axe-core comes from its npm package (scripts/setup.sh fetches it into the venv; never committed). It
is evaluated through the DevTools protocol, which the page's Content-Security-Policy does not govern
(the policy allows scripts from this server only, and stays in force for the page itself).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import FULL_TOKEN, Console, Site, _unavailable, shoot, signed_in
from tests.browser.test_dashboard import blocked, gpu_claimed, running, status, submit
from tests.conftest import REPO_ROOT, wait_until
from tidegate import RunStatus

pytestmark = pytest.mark.browser
WIDE, NARROW = 1280, 420
AXE = sorted((REPO_ROOT / ".venv").glob("axe-core-*/axe.min.js"))
# A moderate violation may stay only with its reason here: {rule id: why it is right as it is}.
JUSTIFIED: dict[str, str] = {}
SEVERE = ("serious", "critical")


@pytest.fixture(scope="module")
def axe_source() -> str:
    if not AXE:
        _unavailable(".venv/axe-core-*/axe.min.js is missing: run scripts/setup.sh (npm pack axe-core)")
    return Path(AXE[-1]).read_text()


def violations(page: Any, axe_source: str) -> list[dict[str, Any]]:
    """axe-core's violations of the page as it stands: rule, impact and the elements, in words."""
    page.evaluate(axe_source)
    found: list[dict[str, Any]] = page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ["violations"]})).violations.map(v => ({
            id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.slice(0, 3).map(n => n.target.join(" ") + ": " + n.failureSummary)}))"""
    )
    return found


def unexplained(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [v for v in found if v["impact"] in SEVERE or v["id"] not in JUSTIFIED]


def in_view(page: Any, selector: str) -> None:
    """The first element matching `selector` lies inside the viewport's width as the page first shows
    it: neither the page nor a table's own box had to scroll sideways to bring it there."""
    width = page.viewport_size["width"]
    element = page.locator(selector).first
    expect(element).to_be_visible()
    # A live refresh replaces the page's nodes: an element found just before it and measured just after
    # is detached and has no box. Measured again, the locator finds the new one (nothing scrolls).
    box = wait_until(element.bounding_box, 10, message=f"{selector} to be measured on the page as it stands")
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, (selector, box, width)
    assert page.evaluate("document.documentElement.scrollWidth") <= width  # the page itself never scrolls sideways


def _named_rate_used(site: Site) -> bool:
    """Whether a step has paid `warehouse_api` (its window counts a start now)."""
    return any(rate.waiting == 0 for rate in site.app.store.named_rates()) and any(
        scope == "rate:@warehouse_api" for scope, _ in site.app.store.rate_states().states
    )


def test_every_page_at_both_widths_answers_in_view_and_passes_axe(
    browser: Any, site: Site, console: Console, axe_source: str
) -> None:
    first, _ = submit(site, "gated.hold", tags={"tenant": "acme"})
    running(site, first)
    queued, _ = submit(site, "gated.hold", priority=3, tags={"tenant": "globex", "region": "eu-west"})
    blocked(site, queued)
    trickle, _ = submit(site, "trickle.hold")
    running(site, trickle)
    behind, _ = submit(site, "trickle.hold")  # a second queue's head: the mixed list has two
    blocked(site, behind)
    held = [submit(site, "gpu.job", n=n) for n in range(2)]
    wait_until(lambda: gpu_claimed(site) == 2, message="two gpu slots claimed")
    parent, _ = submit(site, "family.parent")
    wait_until(lambda: status(site, parent) is RunStatus.WAITING, message="the parent to wait")
    flow = site.app.tasks["etl.diamond"].submit(n=4, gate=site.gate(), held=2)
    paced, _ = submit(site, "rated.hold")  # takes the rate's one token: the next waits 30 s for it
    running(site, paced)
    rate_blocked, _ = submit(site, "rated.hold")
    blocked(site, rate_blocked)
    submit(site, "warehouse.load")  # its step pays the named rate warehouse_api
    wait_until(lambda: _named_rate_used(site), message="the named rate to be paid")

    # Each page's path, then the elements that answer its question (the first of each must be in view).
    pages: dict[str, tuple[str, ...]] = {
        "overview": ("/", ".stats dd"),
        "queue": ("/queue", f'tr[data-run="{queued}"] td.reason', f'tr[data-run="{rate_blocked}"] td.reason'),
        "pools": ("/pools", '[data-pool="gpu"] [data-testid="claimed"]', '[data-rate="warehouse_api"] td.num'),
        "runs": ("/runs", "tbody td .badge[class*=s-]"),
        "limits": ("/limits", "#scopes-title + .table-wrap tbody td:nth-child(2)", '[data-testid="rate"]'),
        "schedules": ("/schedules", '[data-testid="state"]'),
        "workers": ("/workers", "tbody td.heartbeat", "tbody td.busy"),
        "run-overview": (f"/runs/{first}", ".header-grid .badge[class*=s-]"),
        "run-why": (f"/runs/{queued}?tab=why", '[data-testid="blocked-by"]'),
        "run-steps": (f"/runs/{flow.id}?tab=steps", "table[aria-label=Steps] tbody td .badge"),
        "run-children": (f"/runs/{parent}?tab=children", "tr[data-child] .badge[class*=s-]"),
        "run-concurrency": (f"/runs/{held[0][0]}?tab=concurrency", "li[data-event]"),
        "run-events": (f"/runs/{first}?tab=events", "tr[id^=event-] td:nth-child(3)"),
    }
    found: dict[str, list[dict[str, Any]]] = {}
    operator = signed_in(browser, site, FULL_TOKEN, console)
    for width in (WIDE, NARROW):
        operator.set_viewport_size({"width": width, "height": 900})
        for name, (path, *answers) in pages.items():
            operator.goto(f"{site.base}{path}")
            expect(operator.locator("h1")).to_be_visible()
            shoot(operator, site, f"{name}-{width}")
            for answer in answers:
                in_view(operator, answer)
            if name.startswith("run-"):
                tabs = operator.locator("nav.tabs a")
                for index in range(tabs.count()):  # every tab in view, the current one among them
                    in_view(operator, f"nav.tabs a >> nth={index}")
                in_view(operator, 'nav.tabs a[aria-current="page"]')
            nav = operator.locator("header.top").bounding_box()
            assert nav is not None and nav["height"] <= (60 if width == WIDE else 110), nav  # compact
            for index in range(operator.locator("header.top nav a").count()):
                in_view(operator, f"header.top nav a >> nth={index}")
            found[f"{name} at {width}"] = unexplained(violations(operator, axe_source))
    operator.context.close()

    login = browser.new_context(viewport={"width": NARROW, "height": 900}).new_page()
    for width in (WIDE, NARROW):
        login.set_viewport_size({"width": width, "height": 900})
        login.goto(f"{site.base}/login")
        shoot(login, site, f"login-{width}")
        found[f"login at {width}"] = unexplained(violations(login, axe_source))
    login.context.close()
    assert {page: v for page, v in found.items() if v} == {}, json.dumps(found, indent=1)[:6000]
    assert console.errors == []
