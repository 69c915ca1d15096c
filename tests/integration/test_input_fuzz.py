"""Fuzzing every public input: submit through Python and through the CLI, on both stores.

The property is the contract for bad input: a call either succeeds (and the
run is stored with exactly the args given) or raises a `TidegateError` (the
CLI: exit code 1 and one `error:` line, or Typer's own usage error, exit 2),
and a refused call leaves the store as it was. One store per test; modest
example counts keep each test to seconds.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tidegate import App, Concurrency, TidegateError
from tidegate.cli.main import app as cli

from .conftest import execute_sql

FUZZ = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Any code point, lone surrogates and NUL included: the rules must refuse what a store cannot keep.
any_text = st.text(st.characters(blacklist_categories=()), max_size=12)
plain_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
texts = st.one_of(plain_text, any_text, st.sampled_from(["", "\x00", "\ud800", "a\udcffb", "é", "🌊", "x" * 300]))


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**63, -(2**63) - 1]),
    st.sampled_from([400, 5000]).map(lambda digits: 10**digits),  # past what Python will print
    st.floats(),  # NaN and infinities included
    texts,
)
json_like = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=8,
)
hostile = st.one_of(
    json_like,
    st.integers(1, 5000).map(nested),  # up to far past the depth limit (and Python's recursion limit)
    st.sampled_from([70_000, 200_000]).map(lambda n: "x" * n),  # over the 64 KiB limit set below
    st.sampled_from([{1, 2}, b"bytes", object(), (1, 2), {"k": {3: 4}}]),
)
args_strategy = st.one_of(
    st.dictionaries(st.one_of(st.sampled_from(["a", "b", "n"]), texts), hostile, max_size=3),
    st.sampled_from([None, [], "not a dict", {1: 2}]),
)
task_names = st.one_of(st.sampled_from(["fuzz.any", "fuzz.pair", "fuzz.pair", "fuzz.any", "fuzz.unknown"]), texts)
queues = st.one_of(st.none(), st.sampled_from(["default", "fuzz", "undeclared"]), texts)
priorities = st.one_of(
    st.none(), st.integers(), st.sampled_from([2**31, -(2**31) - 1, 2**70]), st.booleans(), st.floats()
)
tag_maps = st.one_of(st.none(), st.dictionaries(texts, texts, max_size=2), st.sampled_from([["env"], "env=prod"]))
keys = st.one_of(st.none(), texts, st.integers())
run_ats = st.one_of(
    st.none(),
    st.timedeltas(),
    st.datetimes(),
    st.datetimes(timezones=st.just(UTC)),
    st.sampled_from([timedelta.max, timedelta.min, datetime.max, datetime.min, "5m", 30]),
)


def state(database_url: str) -> tuple[Any, ...]:
    """Everything a refused call must leave alone."""
    return tuple(
        execute_sql(database_url, statement)[0][0]
        for statement in (
            "SELECT count(*) FROM tidegate_runs",
            "SELECT count(*) FROM tidegate_events",
            "SELECT count(*) FROM tidegate_limit_overrides",
            "SELECT value FROM tidegate_settings WHERE name = 'rules_version'",
        )
    )


@pytest.fixture
def fuzz_app(database_url: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TIDEGATE_MAX_PAYLOAD", "64KiB")
    app = App(database_url)
    app.queue("fuzz", concurrency=Concurrency(global_limit=2))

    @app.task(name="fuzz.any")
    def any_args(**kwargs: Any) -> None:
        return None

    @app.task(name="fuzz.pair", queue="fuzz")
    def pair(a: Any, b: Any = None) -> None:
        return None

    any_args.submit()  # registers the tasks and the queue
    try:
        yield app
    finally:
        app.close()


@FUZZ
@given(
    task=task_names,
    args=args_strategy,
    priority=priorities,
    tags=tag_maps,
    queue=queues,
    run_at=run_ats,
    concurrency_key=keys,
)
def test_python_submit_succeeds_or_refuses_cleanly(
    fuzz_app, database_url, task, args, priority, tags, queue, run_at, concurrency_key
):
    before = state(database_url)
    try:
        handle = fuzz_app.submit(
            task, args, priority=priority, tags=tags, queue=queue, run_at=run_at, concurrency_key=concurrency_key
        )
    except TidegateError:
        assert state(database_url) == before
        return
    stored = fuzz_app.store.get_run(handle.id)
    assert stored is not None
    assert stored.args == json.loads(json.dumps({} if args is None else args))
    assert state(database_url)[0] == before[0] + 1


durations = st.one_of(
    texts,
    st.sampled_from(["0", "0s", "30s", "1h30m", "99999999999d", "1e400", "-1s", "nan", "inf", "250ms", "100y", " 5m "]),
    st.floats(),
    st.integers(),
    st.booleans(),
)


@FUZZ
@given(retry_backoff=durations, timeout=st.one_of(st.none(), durations), deadline=st.one_of(st.none(), durations))
def test_task_durations_succeed_or_refuse_cleanly(fuzz_app, database_url, retry_backoff, timeout, deadline):
    before = state(database_url)
    try:
        register = fuzz_app.task(
            name="fuzz.timed", retry_backoff=retry_backoff, timeout=timeout, dispatch_deadline=deadline
        )
        task = register(lambda: None)
    except TidegateError:
        assert state(database_url) == before
        return
    task.submit()  # a definition that was accepted also stores and schedules
    assert state(database_url)[0] == before[0] + 1


# --- the CLI -------------------------------------------------------------------------------------


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "250", "NO_COLOR": "1"})


def check_cli(result, before, after) -> None:
    """Success, a TidegateError in one line (exit 1), or a Typer usage error (exit 2); never a traceback."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.output)
    if result.exit_code == 1:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    if result.exit_code != 0:
        assert after == before


assignments = st.builds(
    lambda key, value: f"{key}={value}",
    texts,
    st.one_of(
        texts,
        st.sampled_from(
            ["[" * 3000 + "]" * 3000, "[" * 80 + "]" * 80, '"\\u0000"', '"\\ud800"', "NaN", "1e999", "x" * 70_000, "{}"]
        ),
    ),
)
cli_options = st.lists(
    st.one_of(
        st.tuples(st.just("--arg"), assignments),
        st.tuples(st.just("--args"), st.one_of(texts, st.sampled_from(['{"a": 1}', "[1]", '{"a": "\\u0000"}']))),
        st.tuples(st.just("--tag"), st.one_of(assignments, texts)),
        st.tuples(st.just("--priority"), st.one_of(texts, st.integers().map(str))),
        st.tuples(st.just("--queue"), st.one_of(texts, st.just("fuzz"))),
        st.tuples(st.just("--delay"), durations.map(str)),
        st.tuples(st.just("--concurrency-key"), texts),
    ),
    max_size=4,
)


@FUZZ
@given(task=task_names, options=cli_options)
def test_cli_submit_succeeds_or_refuses_in_one_line(fuzz_app, database_url, task, options):
    before = state(database_url)
    flat = [item for option in options for item in option]
    result = invoke("submit", task, *flat, "--database", database_url)
    after = state(database_url)
    check_cli(result, before, after)
    if result.exit_code == 0:
        assert after[0] == before[0] + 1


targets = st.one_of(
    texts,
    st.sampled_from(["global", "queue:fuzz", "tag:env", "queue:nope"]),
    st.builds(str.__add__, st.sampled_from(["tag:env=", "tag:", "queue:", "queue:fuzz/", "queue:fuzz/key="]), texts),
)
numbers = st.one_of(
    texts, st.integers().map(str), st.sampled_from(["0", "-1", "5", "unlimited", str(2**31), str(10**30)])
)
commands = st.one_of(
    st.builds(lambda target, limit: ["limits", "set", target, limit], targets, numbers),
    st.builds(lambda target: ["limits", "reset", target], targets),
    st.builds(lambda pool, limit: ["pools", "set", pool, limit], texts, numbers),
    st.builds(lambda pool: ["pools", "info", pool], texts),
    st.builds(lambda run_id, verb: [*verb, run_id], texts, st.sampled_from([["runs", "show"], ["queue", "why"]])),
    st.builds(
        lambda verb, queue, limit: [*verb, "--queue", queue, "--limit", limit, "--json"],
        st.sampled_from([["runs", "list"], ["queue", "list"]]),
        texts,
        numbers,
    ),
    st.builds(lambda status: ["runs", "list", "--status", status], texts),
)


@FUZZ
@given(command=commands)
def test_cli_lists_and_limits_succeed_or_refuse_in_one_line(fuzz_app, database_url, command):
    before = state(database_url)
    result = invoke(*command, "--database", database_url)
    check_cli(result, before, state(database_url))
