"""How a limit is said on the command line (issue 15 item 3) and what `limits list` calls the code's value
(item 10), on both backends.

`unlimited` lifts a limit; a negative number is a value to refuse with that hint,
never a Typer "No such option" box, never a silent "unlimited".
"""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from tidegate import App, RunQueueConfig
from tidegate.cli.main import app as cli
from tidegate.domain.limits import TagConcurrencyLimit


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


@pytest.fixture
def capped(database_url: str):
    with App(database_url, run_queue=RunQueueConfig(max_concurrent_runs=4)) as app:
        app.task(name="t")(lambda: None)
        app.store.register_limits(app.run_queue, [], ["default"])
        yield app


@pytest.mark.parametrize("value", ["-1", "-2"])
def test_a_negative_limit_is_refused_as_a_value_with_the_word_to_use(capped: App, database_url: str, value) -> None:
    result = invoke("limits", "set", "global", value, "--database", database_url)
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == (
        f"error: LIMIT '{value}' is not valid: to lift the limit say 'unlimited'; else a whole number >= 1"
    )
    assert capped.store.rules().global_limit() == 4  # nothing changed


def test_unlimited_lifts_a_limit(capped: App, database_url: str) -> None:
    result = invoke("limits", "set", "global", "unlimited", "--database", database_url)
    assert result.exit_code == 0, result.output
    assert capped.store.rules().global_limit() is None


def test_a_negative_pool_limit_is_a_value_too(capped: App, database_url: str) -> None:
    result = invoke("pools", "set", "db", "-1", "--create", "--database", database_url)
    assert result.exit_code == 1 and "LIMIT '-1' is not valid: use a whole number >= 0" in result.stderr


def test_limits_list_names_the_code_s_value_not_a_live_one_for_per_value_tag_limits(database_url: str) -> None:
    config = RunQueueConfig(tag_concurrency_limits=[TagConcurrencyLimit(key="tenant", limit=2, per_unique_value=True)])
    with App(database_url, run_queue=config) as app:
        app.store.register_limits(app.run_queue, [], ["default"])
    for target, value in (("tag:tenant=a", "5"), ("tag:tenant", "4")):
        assert invoke("limits", "set", target, value, "--database", database_url).exit_code == 0
    listed = invoke("limits", "list", "--database", database_url).stdout
    row = next(" ".join(line.split()) for line in listed.splitlines() if line.strip().startswith("tag:tenant=a"))
    assert row == "tag:tenant=a 5 0/5 live v1, code: 2 · per-value limit", row  # was "code: 4", tag:tenant's live value
    overrides = [" ".join(line.split()) for line in listed.splitlines() if line.strip().startswith("tag:tenant=a")]
    assert overrides[-1].startswith("tag:tenant=a 5 2 v1"), overrides  # the overrides table: limit, code, version
