"""Once per key from `tidegate submit`: `--unique-key`, `--idempotency-key`, `--idempotency-ttl`.

A duplicate prints the existing run's id on stdout and says on stderr that it is one; bad keys
are one error line and store nothing.
"""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner

from tidegate import App
from tidegate.cli.main import app as cli


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "250", "NO_COLOR": "1"})


def _declared(app: App) -> None:
    @app.task(name="u.cli")
    def task(x: int) -> None:
        return None

    app.declare()


def test_a_duplicate_prints_the_existing_run_and_says_so(app: App, database_url: str) -> None:
    _declared(app)
    common = ("submit", "u.cli", "-a", "x=1", "--database", database_url)
    first = invoke(*common, "--unique-key", "k")
    again = invoke(*common, "--unique-key", "k")
    assert first.exit_code == 0 and again.exit_code == 0, again.output
    assert again.stdout.strip() == first.stdout.strip()
    assert "duplicate" not in first.stderr
    assert again.stderr.strip() == f"duplicate: run {first.stdout.strip()} already holds this key; nothing was stored"
    made = invoke(*common, "--idempotency-key", "order-7", "--idempotency-ttl", "24h")
    repeated = invoke(*common, "--idempotency-key", "order-7")
    assert made.stdout.strip() == repeated.stdout.strip() != first.stdout.strip()
    assert "duplicate" in repeated.stderr
    assert len(app.store.page_runs()) == 2


def test_bad_keys_are_one_error_line_and_store_nothing(app: App, database_url: str) -> None:
    _declared(app)
    common = ("submit", "u.cli", "-a", "x=1", "--database", database_url)
    for extra, message in (
        (("--unique-key", ""), "unique_key must be a non-empty string"),
        (("--idempotency-key", "k", "--idempotency-ttl", "90d"), "idempotency_ttl"),
        (("--idempotency-ttl", "1h"), "idempotency_ttl needs an idempotency_key"),
        (("--unique-key", "a", "--idempotency-key", "b"), "give unique_key or idempotency_key, not both"),
    ):
        result = invoke(*common, *extra)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.exit_code == 1 and len(lines) == 1 and message in lines[0], (extra, result.output)
    assert app.store.page_runs() == []
