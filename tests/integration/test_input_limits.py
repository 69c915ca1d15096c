"""Hostile input is refused cleanly, the same way on both stores, and changes nothing.

Sizes (TIDEGATE_MAX_PAYLOAD) on args and results, nesting depth, NUL and lone
surrogates, durations too large for a date, and TIDEGATE_* tunables that
cannot work: each gets a TidegateError that says what and why (the CLI: one
line, exit code 1), never a RecursionError, an OverflowError or a driver error.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tidegate import App, ConfigurationError, InvalidArgument, RunStatus, WaitTimeout
from tidegate.cli.main import app as cli
from tidegate.domain.jsonvalue import MAX_DEPTH, ensure_json, json_size

from .conftest import execute_sql


def counts(database_url: str) -> tuple[int, int]:
    """What bad input must leave alone: the runs and the events."""
    runs = execute_sql(database_url, "SELECT count(*) FROM tidegate_runs")[0][0]
    events = execute_sql(database_url, "SELECT count(*) FROM tidegate_events")[0][0]
    return runs, events


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.fixture
def small_app(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    """An app (and its workers) with a 64 KiB payload limit, so oversized values stay cheap."""
    monkeypatch.setenv("TIDEGATE_MAX_PAYLOAD", "64KiB")
    app = App(database_url)

    @app.task(name="limits.echo", max_attempts=1)
    def echo(value: object = None) -> object:
        return value

    @app.task(name="limits.make", max_attempts=1)
    def make(kind: str) -> object:
        return {
            "big": "x" * 100_000,
            "nul": {"text": "a\x00b"},
            "surrogate": ["\ud800"],
            "deep": nested(MAX_DEPTH + 1),
        }[kind]

    @app.task(name="limits.pair")
    def pair(a: str, b: str) -> int:
        return len(a) + len(b)

    try:
        yield app
    finally:
        app.close()


def test_oversized_args_are_refused_naming_the_argument_and_the_limit(small_app, database_url):
    small_app.tasks["limits.echo"].submit(value="ok")  # registered; one run stored
    before = counts(database_url)
    with pytest.raises(InvalidArgument) as caught:
        small_app.tasks["limits.echo"].submit(value="x" * 200_000)
    message = str(caught.value)
    assert "'value'" in message and "64 KiB" in message and "TIDEGATE_MAX_PAYLOAD" in message, message
    with pytest.raises(InvalidArgument, match=r"limits.pair: args: 68.4 KiB of JSON \(the largest: 'b', 39.1 KiB\)"):
        small_app.tasks["limits.pair"].submit(a="x" * 30_000, b="y" * 40_000)  # each fits, not both
    assert counts(database_url) == before


def test_the_default_limit_refuses_ten_megabytes(app, database_url):
    @app.task(name="limits.default")
    def default(blob: str) -> int:
        return len(blob)

    default.submit(blob="small")
    before = counts(database_url)
    with pytest.raises(InvalidArgument, match=r"argument 'blob': more than 4 MiB of JSON, over the limit of 4 MiB"):
        default.submit(blob="x" * (10 * 1024 * 1024))
    assert counts(database_url) == before


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (nested(5000), f"nested deeper than {MAX_DEPTH} levels"),
        ({"k": ["ok", "a\x00b"]}, r"argument 'value'\['k'\]\[1\]: string contains the NUL character"),
        ({"a\x00": 1}, "key 'a\\\\x00' contains the NUL character"),
        (["\ud800"], r"argument 'value'\[0\]: string contains a lone surrogate \(\\ud800\)"),
        ({"\udcff": 1}, "lone surrogate"),
        (10**5000, "integer too large"),
        (float("nan"), "not a JSON number"),
    ],
    ids=["deep", "nul", "nul-key", "surrogate", "surrogate-key", "huge-int", "nan"],
)
def test_values_one_store_cannot_keep_are_refused_by_both(small_app, database_url, value, expected):
    echo = small_app.tasks["limits.echo"]
    echo.submit(value=1)
    before = counts(database_url)
    with pytest.raises(InvalidArgument, match=expected):
        echo.submit(value=value)
    assert counts(database_url) == before


@pytest.mark.parametrize(
    "options",
    [
        {"tags": {"env": "a\x00b"}},
        {"tags": {"env": "\ud800"}},
        {"concurrency_key": "k\x00"},
        {"concurrency_key": "\udc80"},
        {"run_at": timedelta(days=99_999_999)},
        {"run_at": datetime(9999, 12, 31)},
        {"run_at": datetime.min},
    ],
    ids=["tag-nul", "tag-surrogate", "key-nul", "key-surrogate", "delay-huge", "run-at-far", "run-at-min"],
)
def test_bad_options_are_refused_by_both(small_app, database_url, options):
    echo = small_app.tasks["limits.echo"]
    echo.submit(value=1)
    before = counts(database_url)
    with pytest.raises(InvalidArgument):
        echo.options(**options).submit(value=2)
    assert counts(database_url) == before


def test_an_argument_name_with_a_surrogate_is_refused(small_app, database_url):
    small_app.tasks["limits.echo"].submit(value=1)
    before = counts(database_url)
    with pytest.raises(InvalidArgument, match="lone surrogate"):
        small_app.submit("limits.echo", {"\ud800": 1})
    assert counts(database_url) == before


def test_the_deepest_accepted_value_round_trips(small_app):
    value = nested(MAX_DEPTH)
    handle = small_app.tasks["limits.echo"].submit(value=value)
    assert small_app.store.get_run(handle.id).args == {"value": value}


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("big", "InvalidResult: result: more than 64 KiB of JSON, over the limit of 64 KiB (TIDEGATE_MAX_PAYLOAD)"),
        ("nul", "InvalidResult: result['text']: string contains the NUL character"),
        ("surrogate", "InvalidResult: result[0]: string contains a lone surrogate"),
        ("deep", f"InvalidResult: result{'[0]' * MAX_DEPTH}: nested deeper than {MAX_DEPTH} levels"),
    ],
)
def test_a_result_that_cannot_be_stored_fails_its_attempt_alike_on_both(small_app, start_worker, kind, expected):
    make = small_app.tasks["limits.make"]
    handle = make.submit(kind=kind)
    start_worker(small_app, poll_interval="50ms")
    record = _finished(small_app, handle.id)
    assert record.status is RunStatus.FAILED
    assert record.result is None
    assert (record.error or "").startswith(expected), record.error


def _finished(app: App, run_id: str):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        record = app.store.get_run(run_id)
        if record.status in (RunStatus.COMPLETED, RunStatus.FAILED):
            return record
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} did not finish")


@pytest.mark.parametrize("name", ["retry_backoff", "timeout", "dispatch_deadline"])
def test_task_durations_too_long_for_a_date_are_refused(app, name):
    with pytest.raises(ConfigurationError, match=f"{name}: '99999999999d' is out of range: use at most 100 years"):
        app.task(name="limits.long", **{name: "99999999999d"})(lambda: None)


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("TIDEGATE_POLL_INTERVAL", "0", "TIDEGATE_POLL_INTERVAL: '0' is out of range: use 10ms to 100 years"),
        ("TIDEGATE_POLL_INTERVAL", "-1s", "TIDEGATE_POLL_INTERVAL: cannot read"),
        ("TIDEGATE_LEASE_DURATION", "100ms", "TIDEGATE_LEASE_DURATION: '100ms' is out of range: use 300ms"),
        ("TIDEGATE_SWEEP_INTERVAL", "0s", "TIDEGATE_SWEEP_INTERVAL: '0s' is out of range"),
        ("TIDEGATE_CLAIM_POLL_INTERVAL", "0", "TIDEGATE_CLAIM_POLL_INTERVAL: '0' is out of range"),
        ("TIDEGATE_OVERFLOW_INTERVAL", "0", "TIDEGATE_OVERFLOW_INTERVAL: '0' is out of range"),
        ("TIDEGATE_SHUTDOWN_GRACE", "99999999999d", "TIDEGATE_SHUTDOWN_GRACE: '99999999999d' is out of range"),
        ("TIDEGATE_CANCEL_GRACE", "soon", "TIDEGATE_CANCEL_GRACE: cannot read"),
    ],
)
def test_tunables_that_cannot_work_are_refused_naming_the_variable(app, monkeypatch, variable, value, expected):
    @app.task(name="limits.tunable")
    def tunable() -> None:
        return None

    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as caught:
        app.worker()
    assert str(caught.value).startswith(expected), str(caught.value)


def test_a_poll_interval_argument_of_zero_is_refused_naming_it(app):
    @app.task(name="limits.arg")
    def arg() -> None:
        return None

    with pytest.raises(ConfigurationError, match="poll_interval: 0 is out of range: use 10ms"):
        app.worker(poll_interval=0)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", "out of range: use 1 KiB to 128 MiB"),
        ("1GiB", "out of range: use 1 KiB to 128 MiB"),
        ("lots", "cannot read 'lots' as a size"),
    ],
)
def test_a_payload_limit_that_cannot_work_is_refused(database_url, monkeypatch, value, expected):
    monkeypatch.setenv("TIDEGATE_MAX_PAYLOAD", value)
    with pytest.raises(ConfigurationError, match=f"TIDEGATE_MAX_PAYLOAD: .*{expected}"):
        App(database_url)


def test_payload_limits_read_human_sizes(database_url, monkeypatch):
    for text, size in (("8MiB", 8 * 1024**2), ("512KB", 512_000), ("2048", 2048), ("1.5 k", 1536)):
        monkeypatch.setenv("TIDEGATE_MAX_PAYLOAD", text)
        assert App(database_url).max_payload == size


# --- the CLI: one line, exit code 1 -------------------------------------------------------------


def one_error_line(result) -> str:
    assert result.exit_code == 1, (result.output, result.exception)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    return lines[0]


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "250", "NO_COLOR": "1", **(env or {})})


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--delay", "99999999999d"], "--delay: '99999999999d' is out of range"),
        (["--args", "[" * 5000 + "]" * 5000], "nested too deep"),
        (["--arg", "v=" + "[" * 5000 + "]" * 5000], "nested too deep"),
        (["--arg", "v=" + "[" * 100 + "]" * 100], f"nested deeper than {MAX_DEPTH} levels"),
        (["--args", '{"v": "a\\u0000b"}'], "NUL character"),
        (["--args", '{"v": "\\ud800"}'], "lone surrogate"),
        (["--tag", "env=\ud800"], "it contains a lone surrogate"),
        (["--concurrency-key", "k\x00"], "concurrency_key"),
        (["--priority", str(2**40)], "priority must be an integer"),
    ],
    ids=["delay", "args-deep", "arg-deep", "arg-deeper-than-limit", "nul", "surrogate", "tag", "key", "priority"],
)
def test_cli_submit_refuses_bad_input_in_one_line(small_app, database_url, extra, expected):
    small_app.tasks["limits.echo"].submit(value=1)
    before = counts(database_url)
    result = invoke("submit", "limits.echo", "--database", database_url, *extra)
    line = one_error_line(result)
    assert expected in line, line
    assert counts(database_url) == before


def test_cli_worker_refuses_a_poll_interval_of_zero_in_one_line(database_url, monkeypatch):
    monkeypatch.delitem(sys.modules, "tests.apps.counted", raising=False)  # its App() reads --database anew
    result = invoke(
        "worker",
        "tests.apps.counted:app",
        "--drain",
        "--database",
        database_url,
        env={"TIDEGATE_POLL_INTERVAL": "0"},
    )
    assert "TIDEGATE_POLL_INTERVAL: '0' is out of range: use 10ms to 100 years" in one_error_line(result)


# --- the size bounds the walk computes (pure, no store) -----------------------------------------

_storable_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)
_storable = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([-(2**200), 2**900])
    | st.floats(allow_nan=False, allow_infinity=False)
    | _storable_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_storable_text, children, max_size=4),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(_storable)
def test_the_walk_bounds_the_stored_size_from_above(value):
    """`ensure_size` trusts this bound to skip serializing: it must never be below the real size."""
    assert ensure_json(value, "v") >= json_size(value)


def test_wait_takes_a_human_duration_and_refuses_a_bad_one(small_app):
    handle = small_app.tasks["limits.echo"].submit(value=1)  # no worker: it stays queued
    with pytest.raises(WaitTimeout, match=r"after 0\.05s"):
        handle.wait(timeout="50ms")
    for bad in ("soon", -1, "99999999999d"):
        with pytest.raises(ConfigurationError, match="timeout"):
            handle.wait(timeout=bad)
