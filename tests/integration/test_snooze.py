"""`raise tidegate.Snooze(delay)` with a real worker, on both backends (issue 25).

The run comes back after the delay without spending an attempt (a task
allowing one attempt snoozes and still completes), its snoozes are counted and
shown where attempts are (`runs show`, the API's run), `max_snoozes` ends it
failed with an error naming the cap, a bad delay fails the attempt with an
error naming the delay, and each snooze logs one `run.snoozed` line.
"""

from __future__ import annotations

import logging
from email.utils import formatdate

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tidegate import App, ConfigurationError, Context, RunFailed, RunStatus, Snooze
from tidegate.api import Tokens, create_api
from tidegate.cli.main import app as cli

from .conftest import event_types


def _shown_attempt(database_url: str, run_id: str) -> str:
    result = CliRunner().invoke(cli, ["runs", "show", run_id, "--database", database_url], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    [line] = [line.strip() for line in result.stdout.splitlines() if line.strip().startswith("attempt ")]
    return line.removeprefix("attempt").strip()


def test_a_snoozed_run_comes_back_after_the_delay_without_spending_an_attempt(
    app: App, database_url: str, start_worker, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[int] = []

    @app.task(name="t.partner", max_attempts=1)
    def partner(ctx: Context) -> str:
        seen.append(ctx.attempt)
        if len(seen) <= 2:
            raise Snooze("300ms", overloaded=len(seen) == 2)
        return "served"

    caplog.set_level(logging.INFO, logger="tidegate.worker")
    start_worker()
    handle = partner.submit()
    assert handle.wait(timeout=60) == "served"

    run = handle.info()
    assert run.status is RunStatus.COMPLETED
    assert (run.attempt, run.max_attempts, run.declared_max_attempts, run.snoozes) == (3, 3, 1, 2)
    assert event_types(app, handle.id).count("RunSnoozed") == 2
    events = app.store.run_events(handle.id)
    snoozes = [event for event in events if event.type == "RunSnoozed"]
    assert [(e.metadata["attempt"], e.metadata["snooze_in"], e.metadata["overloaded"]) for e in snoozes] == [
        (1, 0.3, False),
        (2, 0.3, True),
    ]
    for snooze in snoozes:  # back only after the delay, on the store's clock
        following = next(e for e in events if e.type == "RunDequeued" and e.id > snooze.id)
        assert (following.at - snooze.at).total_seconds() >= 0.3 - 0.01

    assert _shown_attempt(database_url, handle.id) == "3 of 1 allowed, +2 not charged (2 snoozes)"
    api = TestClient(create_api(app, tokens=Tokens()), base_url="http://127.0.0.1")
    body = api.get(f"/api/v1/runs/{handle.id}").json()
    assert (body["attempt"], body["declared_max_attempts"], body["uncharged_attempts"]["snooze"]) == (3, 1, 2)

    lines = [record for record in caplog.records if getattr(record, "event", None) == "run.snoozed"]
    assert [(r.run_id, r.attempt, r.snoozes, r.snooze_in_s, r.overloaded) for r in lines] == [
        (handle.id, 1, 1, 0.3, False),
        (handle.id, 2, 2, 0.3, True),
    ]


def test_max_snoozes_ends_the_run_failed_with_a_clear_error(app: App, start_worker) -> None:
    @app.task(name="t.never_ready", max_snoozes=2)
    def never_ready() -> None:
        raise Snooze(0)

    start_worker()
    handle = never_ready.submit()
    with pytest.raises(RunFailed) as caught:
        handle.wait(timeout=60)
    assert caught.value.error.startswith("SnoozeLimit: the run snoozed 2 times, its task's max_snoozes (2)")
    run = handle.info()
    assert (run.status, run.attempt, run.snoozes, run.declared_max_attempts) == (RunStatus.FAILED, 3, 2, 1)
    assert event_types(app, handle.id).count("RunSnoozed") == 2


def test_a_retry_after_header_value_is_a_delay(app: App, start_worker) -> None:
    """Seconds, or an HTTP date (one in the past: due at once)."""
    headers = iter(["1", formatdate(app.clock.wall() - 3600, usegmt=True)])

    @app.task(name="t.rate_limited")
    def rate_limited(ctx: Context) -> int:
        header = next(headers, None)
        if header is not None:
            raise Snooze(header)
        return ctx.attempt

    start_worker()
    handle = rate_limited.submit()
    assert handle.wait(timeout=60) == 3
    delays = [e.metadata["snooze_in"] for e in app.store.run_events(handle.id) if e.type == "RunSnoozed"]
    assert delays == [1.0, 0.0]


@pytest.mark.parametrize(
    ("delay", "named"),
    [("soon", "cannot read 'soon'"), (-1, "from 0 seconds to 100 years"), ("-5s", "cannot read '-5s'"), (None, "None")],
)
def test_a_bad_delay_fails_the_attempt_naming_it(app: App, start_worker, delay: object, named: str) -> None:
    @app.task(name="t.bad_delay")
    def bad_delay() -> None:
        raise Snooze(delay)  # type: ignore[arg-type]

    start_worker()
    handle = bad_delay.submit()
    with pytest.raises(RunFailed) as caught:
        handle.wait(timeout=60)
    assert "InvalidArgument" in caught.value.error and named in caught.value.error
    run = handle.info()
    assert (run.snoozes, run.max_attempts) == (0, 1)


def test_max_snoozes_is_checked_where_the_task_is_declared(app: App) -> None:
    for bad in (-1, 1.5, True, 10**7):
        with pytest.raises(ConfigurationError, match="max_snoozes must be an integer from 0 to 1000000"):
            app.task(name="t.badcap", max_snoozes=bad)(lambda: None)  # type: ignore[arg-type]
