"""Named rates on every limits surface (issue 25, scope item 7), on both backends.

A named rate (`App.set_rate_limit`) is a window target of the live limits, `rate:@NAME@PER`
(`@PER` optional for one window), beside a queue's and a tag's: listed by `limits list`,
`GET /api/v1/limits`, the dashboard's `/limits` and `/metrics` with the cost its state counts
now; set, previewed and reset by `tidegate limits`, `PUT|DELETE /api/v1/limits` and the
dashboard through the named-rate verbs (one override per rate, versioned and audited there).
Bad input is refused with a clear error and nothing stored at the Python, CLI and HTTP doors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.apps.api import local_client, store_size
from tests.contract.conftest import claim, enqueue_one
from tidegate import App, Rate
from tidegate.cli.main import app as cli
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.named_rates import label
from tidegate.domain.steps import SlotRequest
from tidegate.engine.operators import limits
from tidegate.engine.operators.limit_table import limit_table

TARGET = "rate:@warehouse_api@1m"


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


@pytest.fixture
def named(database_url: str, clock: ShiftedClock) -> Iterator[App]:
    """`warehouse_api`: 10 starts a minute, burst 4 (a charge still counts seconds later);
    `exports`: 5 a second and 100 a minute."""
    with App(database_url, clock=clock) as app:
        app.set_rate_limit("warehouse_api", 10, per="1m", burst=4)
        app.set_rate_limit("exports", [Rate(5, "1s"), Rate(100, "1m")])
        app.store.set_pool_limit("db", 5, 300)
        yield app


def _pay(app: App, cost: int) -> None:
    """A running run's step pays `cost` of warehouse_api, as a step claim does."""
    enqueue_one(app.store)
    [run] = claim(app.store)
    assert app.store.acquire_slots(run.fence, "w1", SlotRequest("load", {}, {}, {"warehouse_api": cost})).granted


def _rate(app: App, name: str = "warehouse_api") -> Any:
    return next(rate for rate in app.store.named_rates() if rate.name == name)


def test_a_window_is_set_and_reset_through_the_named_rate_verbs_with_its_burst_kept(named: App) -> None:
    change = limits.set_limit(named.store, "rate:@warehouse_api", 5)  # one window: @PER may be left out
    assert (change.target, change.old, change.new, change.version) == (TARGET, 10, 5, 1)
    rate = _rate(named)
    assert (label(rate.rates), rate.rates[0].allowed_burst, rate.source) == ("5/1m", 2, "override")
    again = limits.set_limit(named.store, TARGET, 10)  # scaled from the code's burst: no wear
    assert (again.old, again.new, again.version, _rate(named).rates[0].allowed_burst) == (5, 10, 2, 4)
    one = limits.set_limit(named.store, "rate:@exports@1m", 50)  # the other window stays as it is
    assert (one.target, label(_rate(named, "exports").rates)) == ("rate:@exports@1m", "5/1s, 50/1m")
    reset = limits.reset_limits(named.store, "rate:@exports@1m")  # the rate's whole override: each window
    assert [(each.target, each.old, each.new) for each in reset] == [
        ("rate:@exports@1m", 50, 100),
        ("rate:@exports@1s", 5, 5),
    ]
    assert _rate(named, "exports").source == "code"
    audited = [e.metadata for e in named.store.events_after(0, 100) if e.type == "LimitChanged"]
    assert [(each["target"], each["new"], each["source"]) for each in audited][-3:] == [
        ("rate:@warehouse_api", "10/1m", "override"),
        ("rate:@exports", "5/1s, 50/1m", "override"),
        ("rate:@exports", "5/1s, 100/1m", "code"),
    ]


def test_the_table_and_metrics_show_each_window_with_the_cost_it_counts_now(named: App) -> None:
    _pay(named, 3)
    limits.set_limit(named.store, TARGET, 8)
    table = limit_table(named.store)
    rows = {row.target: row for row in table.limits}
    row = rows[TARGET]
    shown = (row.limit, row.code_limit, row.used, row.live, row.version, row.per, row.burst)
    assert shown == (8, 10, 3, True, 1, 60.0, 3)
    assert row.note == "named rate: steps pay it · 0 waiting" and row.declared == "code"
    minute = rows["rate:@exports@1m"]
    assert (minute.limit, minute.used, minute.live) == (100, 0, False)
    assert [(each.target, each.limit, each.version) for each in table.overrides] == [(TARGET, 8, 1)]
    metrics = local_client(named.asgi()).get("/metrics").text
    assert 'tidegate_rate_tokens_used{per="1m",scope="rate:@warehouse_api"} 3.0' in metrics
    assert 'tidegate_rate_tokens_limit{per="1m",scope="rate:@warehouse_api"} 8.0' in metrics
    assert 'tidegate_rate_tokens_limit{per="1m",scope="rate:@exports"} 100.0' in metrics


BAD = [
    ("rate:@nope@1s", 2, "no named rate 'nope' is declared (named rates: exports, warehouse_api)"),
    ("rate:@exports", 2, "the rate has several windows (1s, 1m); name one: rate:@exports@PER"),
    ("rate:@warehouse_api@5m", 2, "the rate has no window of 5m (its windows: 1m)"),
    ("rate:@warehouse_api@soon", 2, "cannot read 'soon' as a duration"),
    (TARGET, 0, "a limit must be at least 1, got 0"),
    (TARGET, None, "a rate cannot be made unlimited live"),
]


@pytest.mark.parametrize(("target", "limit", "message"), BAD)
def test_bad_input_at_the_python_door_is_refused_and_nothing_is_stored(
    named: App, database_url: str, target: str, limit: int | None, message: str
) -> None:
    before = store_size(database_url)
    pattern = message.replace("(", r"\(").replace(")", r"\)")
    with pytest.raises(ConfigurationError, match=pattern):
        limits.set_limit(named.store, target, limit)
    with pytest.raises(ConfigurationError, match=pattern):
        limits.preview(named.store, target, limit)
    assert store_size(database_url) == before and {rate.source for rate in named.store.named_rates()} == {"code"}


def test_the_cli_previews_sets_lists_and_resets_a_named_rate_and_refuses_bad_input(
    named: App, database_url: str
) -> None:
    preview = _invoke("limits", "set", "rate:@warehouse_api", "4", "--dry-run", "--database", database_url)
    assert preview.exit_code == 0, preview.output
    assert f"{TARGET}: 10 -> 4  (dry run: nothing changed)" in preview.stdout
    assert "0 steps wait for this named rate now" in preview.stdout
    for argv, message in [
        (["rate:@nope", "2"], "no named rate 'nope' is declared"),
        ([TARGET, "0"], "a limit must be at least 1"),
        ([TARGET, "unlimited"], "a rate cannot be made unlimited live"),
    ]:
        refused = _invoke("limits", "set", *argv, "--database", database_url)
        assert refused.exit_code == 1 and message in refused.stderr, refused.output
    assert {rate.source for rate in named.store.named_rates()} == {"code"}
    nothing = _invoke("limits", "reset", TARGET, "--database", database_url)
    assert nothing.exit_code == 0 and "no live override to reset (limit in force: 10)" in nothing.stdout
    done = _invoke("limits", "set", TARGET, "4", "--database", database_url)
    assert done.exit_code == 0 and f"{TARGET}: 10 -> 4  (live override, version 1)" in done.stdout, done.output
    listed = json.loads(_invoke("limits", "list", "--json", "--database", database_url).stdout)
    row = next(row for row in listed["limits"] if row["target"] == TARGET)
    assert (row["limit"], row["code_limit"], row["live"], row["per"]) == (4, 10, True, 60.0)
    table = _invoke("limits", "list", "--database", database_url).stdout
    assert "4/1m" in table and "live v1, code: 10" in table and "named rate: steps pay it" in table
    assert "live overrides" in table
    undo = _invoke("limits", "reset", TARGET, "--dry-run", "--database", database_url)
    assert undo.exit_code == 0 and f"{TARGET}: 4 -> 10  (dry run: nothing changed)" in undo.stdout
    reset = _invoke("limits", "reset", TARGET, "--database", database_url)
    assert reset.exit_code == 0 and f"{TARGET}: 4 -> 10" in reset.stdout, reset.output
    assert _rate(named).source == "code"


def test_the_api_sets_previews_and_resets_a_named_rate_and_refuses_bad_input(named: App, database_url: str) -> None:
    client = local_client(named.asgi())
    before = store_size(database_url)
    for body, blamed in [
        ({"target": "rate:@nope@1s", "limit": 2}, "target"),
        ({"target": "rate:@exports", "limit": 2}, "target"),
        ({"target": TARGET, "limit": 0}, "limit"),
        ({"target": TARGET, "limit": None}, "limit"),
    ]:
        refused = client.put("/api/v1/limits", json=body)
        assert refused.status_code == 422 and blamed in refused.text, refused.text
    assert store_size(database_url) == before
    dry = client.put("/api/v1/limits", json={"target": TARGET, "limit": 3, "dry_run": True}).json()
    assert (dry["old"], dry["new"], dry["dry_run"], dry["waiting"]) == (10, 3, True, 0)
    assert _rate(named).source == "code"
    changed = client.put("/api/v1/limits", json={"target": "rate:@exports@1s", "limit": 2})
    assert changed.status_code == 200, changed.text
    assert {key: changed.json()[key] for key in ("target", "old", "new", "version")} == {
        "target": "rate:@exports@1s", "old": 5, "new": 2, "version": 1,
    }  # fmt: skip
    shown = client.get("/api/v1/limits").json()
    row = next(row for row in shown["limits"] if row["target"] == "rate:@exports@1s")
    assert (row["limit"], row["code_limit"], row["live"]) == (2, 5, True)
    assert [each["target"] for each in shown["overrides"]] == ["rate:@exports@1s", "rate:@exports@1m"]
    client.put("/api/v1/limits", json={"target": "global", "limit": 3})
    every = client.delete("/api/v1/limits").json()["reset"]  # every override: the named rates' too
    assert [(each["target"], each["new"]) for each in every] == [
        ("global", None),
        ("rate:@exports@1s", 5),
        ("rate:@exports@1m", 100),
    ]
    assert {rate.source for rate in named.store.named_rates()} == {"code"}


def test_the_dashboard_lists_previews_and_sets_a_named_rate(named: App) -> None:
    from tests.integration.test_dashboard_pages import FULL, client, form_token

    browser = client(named, FULL)
    page = browser.get("/limits").text
    assert TARGET in page and "per 1m · burst 4" in page and "rate:@exports@1m" in page
    token = form_token(browser, "/limits")
    shown = browser.post("/limits/preview", data={"form_token": token, "target": "rate:@nope", "limit": "2"})
    assert shown.status_code == 422 and "no named rate &#39;nope&#39; is declared" in shown.text
    shown = browser.post("/limits/preview", data={"form_token": token, "target": "rate:@warehouse_api", "limit": "2"})
    assert shown.status_code == 200 and f"Confirm: set {TARGET} to 2" in shown.text
    assert "0 steps wait for this named rate now" in shown.text
    done = browser.post("/limits/set", data={"form_token": token, "target": TARGET, "limit": "2"})
    assert done.status_code in (200, 303)
    assert (label(_rate(named).rates), _rate(named).source) == ("2/1m", "override")
