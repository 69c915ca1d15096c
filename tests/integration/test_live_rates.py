"""Live rate changes (issue 25, scope item 7), on both backends: a rate window's limit set and reset
like any live limit (`rate:QUEUE@PER`, `rate:QUEUE/PARTITION@PER`, `rate:tag:KEY[=VALUE]@PER`),
versioned and audited, in force at the next claim, shown on `limits list`, `GET /limits` and the
dashboard's `/limits`; bad input refused with a clear error and nothing stored at the Python,
CLI and HTTP doors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.apps.api import local_client, store_size
from tidegate import App, Partition, Rate, RunQueueConfig, TagRateLimit
from tidegate.cli.main import app as cli
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.model import CycleRequest
from tidegate.engine.operators import limits
from tidegate.engine.operators.limit_table import limit_table


def _claimed(app: App, queue: str = "api", limit: int = 20) -> list[str]:
    return [run.id for run in app.store.cycle(CycleRequest("w1", [queue], [], [], limit, 60)).claimed]


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


@pytest.fixture
def rated(database_url: str, clock: ShiftedClock) -> Iterator[App]:
    """Queue `api`: 4 starts a second (burst 4) and 100 a minute; queue `keyed`: 6 a minute per `key`;
    a tag rate of 5 a second per tenant."""
    tenants = TagRateLimit(key="tenant", per_unique_value=True, limit=5, per="1s", burst=5)
    with App(database_url, clock=clock, run_queue=RunQueueConfig(tag_rate_limits=[tenants])) as app:
        yield _declare(app)


def _declare(app: App) -> App:
    app.queue("api", rate=[Rate(limit=4, per="1s", burst=4), Rate(limit=100, per="1m", burst=10)])
    app.queue("keyed", rate=Rate(limit=6, per="1m", burst=6), rate_partition=Partition(by_args=["key"]))
    app.task(name="call", queue="api")(lambda: None)
    app.task(name="keyed", queue="keyed")(lambda key: None)
    app.enqueue([])
    return app


def test_a_lowered_window_is_in_force_at_the_next_claim_and_a_reset_brings_back_the_code(
    rated: App, clock: ShiftedClock
) -> None:
    runs = [rated.submit("call").id for _ in range(8)]
    change = limits.set_limit(rated.store, "rate:api@1s", 2)
    assert (change.target, change.old, change.new, change.version) == ("rate:api@1s", 4, 2, 1)
    assert [rate.label for rate in rated.store.rules().rate_windows("rate:api")] == ["2/1s", "100/1m"]
    assert rated.store.rules().rate_windows("rate:api")[0].allowed_burst == 2  # the burst follows: 4 * 2 // 4
    assert _claimed(rated) == runs[:2]  # two, not the code's four
    event = rated.store.latest_events("LimitChanged", 1)[0]
    assert (event.metadata["target"], event.metadata["old"], event.metadata["new"]) == ("rate:api@1s", 4, 2)
    reset = limits.reset_limit(rated.store, "rate:api@1s")
    assert (reset.old, reset.new) == (2, 4)
    clock.advance(2)
    assert _claimed(rated) == runs[2:6]  # the code's burst again
    assert rated.store.limit_overrides() == []


def test_a_rate_of_one_window_is_named_without_it_and_targets_are_normalised(rated: App) -> None:
    assert limits.set_limit(rated.store, "rate:keyed", 3).target == "rate:keyed@1m"
    assert limits.set_limit(rated.store, "rate:api@1000ms", 3).target == "rate:api@1s"
    assert limits.set_limit(rated.store, "rate:api@60", 50).target == "rate:api@1m"


def test_a_partition_s_own_window_wins_over_its_queue_s(rated: App) -> None:
    limits.set_limit(rated.store, "rate:keyed@1m", 2)  # every partition
    limits.set_limit(rated.store, "rate:keyed/key=b@1m", 4)  # b's own
    a = [rated.submit("keyed", {"key": "a"}).id for _ in range(5)]
    b = [rated.submit("keyed", {"key": "b"}).id for _ in range(5)]
    claimed = _claimed(rated, "keyed")
    assert sorted(claimed) == sorted(a[:2] + b[:4])
    rows = {row.target: row for row in limit_table(rated.store).limits}
    assert (rows["rate:keyed@1m"].limit, rows["rate:keyed@1m"].used) == (2, None)  # a family: members count
    a_row, b_row = rows["rate:keyed/key=a@1m"], rows["rate:keyed/key=b@1m"]
    assert (a_row.limit, a_row.used, a_row.live, a_row.parent) == (2, 2, False, "rate:keyed@1m")
    assert a_row.note == "live rate:keyed@1m"  # it follows its queue's override
    assert (b_row.limit, b_row.used, b_row.live, b_row.code_limit, b_row.per, b_row.burst) == (4, 4, True, 6, 60.0, 4)


def test_a_tag_rate_is_changed_for_every_value_or_for_one(rated: App) -> None:
    limits.set_limit(rated.store, "rate:tag:tenant@1s", 1)
    limits.set_limit(rated.store, "rate:tag:tenant=big@1s", 3)
    small = [rated.submit("call", tags={"tenant": "small"}).id for _ in range(3)]
    big = [rated.submit("call", tags={"tenant": "big"}).id for _ in range(3)]
    assert sorted(_claimed(rated)) == sorted(small[:1] + big[:3])
    rows = {row.target: row for row in limit_table(rated.store).limits}
    assert (rows["rate:tag:tenant@1s"].limit, rows["rate:tag:tenant@1s"].code_limit) == (1, 5)
    assert (rows["rate:tag:tenant=small@1s"].used, rows["rate:tag:tenant=big@1s"].used) == (1, 3)


BAD = [
    ("rate:api", 2, "the rate has several windows (1s, 1m); name one: rate:api@PER"),
    ("rate:api@5m", 2, "the rate has no window of 5m (its windows: 1s, 1m)"),
    ("rate:api@soon", 2, "cannot read 'soon' as a duration"),
    ("rate:nope@1s", 2, "no queue named 'nope' declares a rate"),
    ("rate:keyed/region=eu@1m", 2, "'region' is not a partition key of this queue"),
    ("rate:api/key=a@1s", 2, "the rate of queue 'api' has no partitions"),
    ("rate:tag:other@1s", 2, "no tag rate is declared for every value of tag other"),
    ("rate:api@1s", 0, "a limit must be at least 1, got 0"),
    ("rate:api@1s", -3, "a limit must be at least 1, got -3"),
    ("rate:api@1s", None, "a rate cannot be made unlimited live"),
]


@pytest.mark.parametrize(("target", "limit", "message"), BAD)
def test_bad_input_at_the_python_door_is_refused_and_nothing_is_stored(
    rated: App, database_url: str, target: str, limit: int | None, message: str
) -> None:
    before = store_size(database_url)
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        limits.set_limit(rated.store, target, limit)
    with pytest.raises(ConfigurationError):
        limits.preview(rated.store, target, limit)
    assert store_size(database_url) == before and rated.store.limit_overrides() == []


def test_the_cli_sets_previews_lists_and_resets_a_rate_and_refuses_bad_input(rated: App, database_url: str) -> None:
    runs = [rated.submit("call").id for _ in range(4)]
    preview = _invoke("limits", "set", "rate:api@1s", "1", "--dry-run", "--database", database_url)
    assert preview.exit_code == 0, preview.output
    assert "rate:api@1s: 4 -> 1  (dry run: nothing changed)" in preview.stdout
    assert "would unblock 0 queued runs / hold back 3" in preview.stdout  # of the burst of 4, only 1 now
    assert rated.store.limit_overrides() == []
    for argv, message in [
        (["rate:api@5m", "2"], "the rate has no window of 5m"),
        (["rate:api@1s", "0"], "a limit must be at least 1"),
        (["rate:api@1s", "unlimited"], "a rate cannot be made unlimited live"),
        (["rate:api", "2"], "name one: rate:api@PER"),
    ]:
        refused = _invoke("limits", "set", *argv, "--database", database_url)
        assert refused.exit_code == 1 and message in refused.stderr, refused.output
    assert rated.store.limit_overrides() == []
    done = _invoke("limits", "set", "rate:api@1s", "2", "--database", database_url)
    assert done.exit_code == 0 and "rate:api@1s: 4 -> 2  (live override, version 1)" in done.stdout, done.output
    assert _claimed(rated) == runs[:2]
    listed = json.loads(_invoke("limits", "list", "--json", "--database", database_url).stdout)
    row = next(row for row in listed["limits"] if row["target"] == "rate:api@1s")
    assert {key: row[key] for key in ("limit", "code_limit", "used", "live", "version", "per", "burst")} == {
        "limit": 2, "code_limit": 4, "used": 2, "live": True, "version": 1, "per": 1.0, "burst": 2,
    }  # fmt: skip
    table = _invoke("limits", "list", "--database", database_url).stdout
    assert "rate:api@1s" in table and "2/1s" in table and "live v1, code: 4 · burst 2" in table
    reset = _invoke("limits", "reset", "rate:api@1s", "--database", database_url)
    assert reset.exit_code == 0 and "rate:api@1s: 2 -> 4" in reset.stdout, reset.output


def test_the_api_sets_and_resets_a_rate_and_refuses_bad_input(rated: App, database_url: str) -> None:
    client = local_client(rated.asgi())
    before = store_size(database_url)
    for body, blamed in [
        ({"target": "rate:api@5m", "limit": 2}, "target"),
        ({"target": "rate:api@1s", "limit": 0}, "limit"),
        ({"target": "rate:api@1s", "limit": None}, "limit"),
        ({"target": "rate:api@never", "limit": 2}, "target"),
    ]:
        refused = client.put("/api/v1/limits", json=body)
        assert refused.status_code == 422 and blamed in refused.text, refused.text
    assert store_size(database_url) == before and rated.store.limit_overrides() == []
    changed = client.put("/api/v1/limits", json={"target": "rate:api@1m", "limit": 30})
    assert changed.status_code == 200, changed.text
    assert {key: changed.json()[key] for key in ("target", "old", "new", "version")} == {
        "target": "rate:api@1m", "old": 100, "new": 30, "version": 1,
    }  # fmt: skip
    row = next(row for row in client.get("/api/v1/limits").json()["limits"] if row["target"] == "rate:api@1m")
    assert (row["limit"], row["code_limit"], row["live"], row["per"], row["burst"]) == (30, 100, True, 60.0, 3)
    reset = client.delete("/api/v1/limits", params={"target": "rate:api@1m"})
    assert reset.status_code == 200 and reset.json()["reset"][0]["new"] == 100, reset.text


def test_the_dashboard_shows_each_window_and_changes_one_through_the_preview(rated: App) -> None:
    from tests.integration.test_dashboard_pages import FULL, client, form_token

    browser = client(rated, FULL)
    page = browser.get("/limits").text
    assert "rate:api@1s" in page and "per 1s · burst 4" in page and "rate:keyed@1m" in page
    token = form_token(browser, "/limits")
    shown = browser.post("/limits/preview", data={"form_token": token, "target": "rate:api", "limit": "2"})
    assert shown.status_code == 422 and "name one: rate:api@PER" in shown.text
    shown = browser.post("/limits/preview", data={"form_token": token, "target": "rate:api@1s", "limit": "2"})
    assert shown.status_code == 200 and "Confirm: set rate:api@1s to 2" in shown.text
    assert rated.store.limit_overrides() == []
    done = browser.post("/limits/set", data={"form_token": token, "target": "rate:api@1s", "limit": "2"})
    assert done.status_code in (200, 303)
    assert [(each.target, each.limit) for each in rated.store.limit_overrides()] == [("rate:api@1s", 2)]
