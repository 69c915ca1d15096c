"""A request that can never succeed is answered with its fault, never 429 (issue 23 item 4), on both backends.

The queue is at its `max_active` ceiling, so every well-formed submit is
refused 429 with Retry-After. A malformed one (args that do not fit the task,
a bad option, an unknown task) must name its field instead, at every door:
over HTTP also when the server repeats a fresh refusal on the loop without
the store (api/refusals.py), in Python and on the command line. Nothing is stored.
"""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from tests.apps.api import local_client, store_size
from tidegate import App
from tidegate.api.refusals import Refusals
from tidegate.cli.main import app as cli
from tidegate.domain.errors import AdmissionRejected, ArgumentMismatch, InvalidArgument, UnknownTask

MALFORMED = [
    ({"task": "ingets", "args": {"n": 1}}, "task", "did you mean 'ingest'?"),
    ({"task": "ingest", "args": {"m": 1}}, "args", "unknown argument 'm'"),
    ({"task": "ingest", "args": {"n": "one"}}, "args", "'n'"),
    ({"task": "ingest", "args": {"n": 1}, "priority": 2**31}, "priority", "priority must be an integer"),
    ({"task": "ingest", "args": {"n": 1}, "tags": {"bad key": "x"}}, "tags", "tag name 'bad key'"),
    ({"task": "ingest", "args": {"n": 1}, "concurrency_key": "a\nb"}, "concurrency_key", "concurrency_key"),
    ({"task": "ingest", "args": {"n": 1}, "run_at": "9999-01-01T00:00:00Z"}, "run_at", "out of range"),
]


@pytest.fixture
def full(app: App) -> App:
    """Queue `ingest` at its ceiling: one run queued of `max_active=1`, no worker."""
    app.queue("ingest", max_active=1)

    @app.task(name="ingest", queue="ingest")
    def ingest(n: int) -> int:
        return n

    ingest.submit(n=0)
    with pytest.raises(AdmissionRejected):
        ingest.submit(n=1)
    return app


@pytest.mark.parametrize(("body", "field", "detail"), MALFORMED, ids=[field for _, field, _ in MALFORMED])
def test_http_names_the_field_of_a_malformed_submit_to_a_full_queue_even_while_a_refusal_is_repeated(
    full: App, database_url: str, body: dict[str, Any], field: str, detail: str
) -> None:
    api = full.asgi()
    api.state.refusals = Refusals(clock=lambda: 0.0)  # a refusal, once given, is repeated throughout
    client = local_client(api)
    before = store_size(database_url)
    for attempt in ("from the store", "repeated on the loop"):
        answer = client.post("/api/v1/runs", json=body)
        assert answer.status_code == 422, f"{attempt}: {answer.status_code} {answer.text}"
        assert "Retry-After" not in answer.headers
        assert answer.json()["field"] == field and detail in answer.json()["detail"], answer.text
        refused = client.post("/api/v1/runs", json={"task": "ingest", "args": {"n": 2}})
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1, refused.text
    batch = client.post("/api/v1/runs/batch", json={"runs": [body]})
    assert batch.status_code == 422 and batch.json()["field"] == f"runs.0.{field}", batch.text
    assert store_size(database_url) == before


def test_python_names_the_argument_of_a_malformed_submit_to_a_full_queue(full: App) -> None:
    with pytest.raises(ArgumentMismatch, match="unknown argument 'm'"):
        full.submit("ingest", {"m": 1})
    with pytest.raises(InvalidArgument, match="priority must be an integer"):
        full.submit("ingest", {"n": 1}, priority=2**31)
    with pytest.raises(UnknownTask):
        full.submit("ingets", {"n": 1})


@pytest.mark.parametrize(
    ("options", "detail"),
    [
        (["--arg", "m=1"], "unknown argument 'm'"),
        (["--arg", "n=1", "--priority", str(2**31)], "priority must be an integer"),
        (["--arg", "n=1", "--tag", "bad key=x"], "tag name 'bad key'"),
    ],
    ids=["args", "priority", "tags"],
)
def test_cli_names_the_fault_of_a_malformed_submit_to_a_full_queue(
    full: App, database_url: str, options: list[str], detail: str
) -> None:
    before = store_size(database_url)
    result = CliRunner().invoke(cli, ["submit", "ingest", *options, "--database", database_url], env={"NO_COLOR": "1"})
    assert result.exit_code == 1, result.output
    assert detail in result.stderr and "admission" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert store_size(database_url) == before
