"""Every submit by name is checked against the task's stored parameters before anything is stored
(issue 15 item 4, issue 12's "server without MODULE:APP"), and an unknown name answers with the
closest registered ones (issue 15 item 1): from Python, the CLI and HTTP alike.

The task's code lives only in `code`, an app whose worker registers the task; every
other caller knows it by name from the store, as a CLI, a server without MODULE:APP or
another service would. Each refusal leaves the runs and events as they were.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.apps.api import local_client, store_size
from tidegate import App, ArgumentMismatch, UnknownTask
from tidegate.cli.main import app as cli
from tidegate.domain.model import TaskDefinition

TASK = "tasks.add"


@pytest.fixture
def code(database_url: str) -> Iterator[App]:
    """The app with the code: its worker (created, not started) registers `tasks.add` in the store."""
    application = App(database_url)

    @application.task(name=TASK, queue="math")
    def add(x: int, y: int, *, scale: float = 1.0, note: str | None = None) -> float:
        return (x + y) * scale

    application.worker()
    try:
        yield application
    finally:
        application.close()


@pytest.fixture
def bare(code: App, database_url: str) -> Iterator[App]:
    """An app without the code: it knows the task only as the store has it."""
    with App(database_url) as application:
        assert application.tasks == {}
        yield application


BAD_ARGS = [
    pytest.param({"x": 1}, "missing required argument 'y'", id="a required argument missing"),
    pytest.param({"x": 1, "y": 2, "z": 3}, "unknown argument 'z' (known: x, y, scale, note)", id="unknown argument"),
    pytest.param({"x": "1", "y": 2}, "argument 'x' must be an integer, got string", id="text for an int"),
    pytest.param(
        {"x": 1, "y": 2, "scale": "2"}, "argument 'scale' must be a number, got string", id="text for a float"
    ),
    pytest.param({"x": 1, "y": True}, "argument 'y' must be an integer, got boolean", id="a bool for an int"),
    pytest.param({"x": 1, "y": 2, "note": 5}, "argument 'note' must be a string or null", id="an int for str | None"),
]


@pytest.mark.parametrize(("args", "problem"), BAD_ARGS)
def test_python_by_name_refuses_args_that_do_not_fit_and_stores_nothing(bare, database_url, args, problem):
    before = store_size(database_url)
    with pytest.raises(ArgumentMismatch) as error:
        bare.submit(TASK, args)
    assert str(error.value).startswith(f"{TASK}: {problem}")
    assert store_size(database_url) == before


@pytest.mark.parametrize(("args", "problem"), BAD_ARGS)
def test_the_function_object_is_checked_by_the_same_rule(code, database_url, args, problem):
    before = store_size(database_url)
    with pytest.raises(ArgumentMismatch) as error:
        code.tasks[TASK].submit(**args)
    assert str(error.value).startswith(f"{TASK}: {problem}")
    assert store_size(database_url) == before


def test_args_that_fit_are_stored_from_every_caller(code, bare, database_url):
    by_name = bare.submit(TASK, {"x": 1, "y": 2, "scale": 3, "note": None})  # an int is a number
    by_function = code.tasks[TASK].submit(x=1, y=2)
    assert {run.id for run in bare.store.page_runs()} == {by_name.id, by_function.id}


def test_a_task_registered_without_parameters_is_not_checked(bare):
    """A task registered by a tidegate that stored no description submits as before."""
    bare.store.register_tasks([TaskDefinition(name="old.task", queue="math")])
    assert bare.submit("old.task", {"anything": [1]}).info().args == {"anything": [1]}


def test_python_by_name_suggests_the_registered_name(bare, database_url):
    before = store_size(database_url)
    with pytest.raises(UnknownTask, match=r"^unknown task 'add'; did you mean 'tasks\.add'\?$"):
        bare.submit("add", {"x": 1, "y": 2})
    with pytest.raises(UnknownTask, match="no app has registered it"):
        bare.submit("subtract", {})
    assert store_size(database_url) == before


# --- the CLI -------------------------------------------------------------------------------------------


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "250", "NO_COLOR": "1"})


def one_error_line(result: Any) -> str:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def test_cli_submit_refuses_args_that_do_not_fit_before_storing(code, database_url):
    before = store_size(database_url)
    refused = invoke("submit", TASK, "-a", "x=1", "--database", database_url)
    assert one_error_line(refused) == f"error: {TASK}: missing required argument 'y'"
    wrong_type = invoke("submit", TASK, "-a", "x=one", "-a", "y=2", "--database", database_url)
    assert one_error_line(wrong_type) == f"error: {TASK}: argument 'x' must be an integer, got string"
    assert store_size(database_url) == before
    accepted = invoke("submit", TASK, "-a", "x=1", "-a", "y=2", "--database", database_url)
    assert accepted.exit_code == 0, accepted.output
    assert store_size(database_url)[0] == before[0] + 1


def test_cli_submit_suggests_the_registered_name(code, database_url):
    before = store_size(database_url)
    result = invoke("submit", "add", "-a", "x=1", "-a", "y=2", "--database", database_url)
    assert one_error_line(result) == "error: unknown task 'add'; did you mean 'tasks.add'?"
    assert store_size(database_url) == before


# --- HTTP ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("served", ["bare", "code"])
@pytest.mark.parametrize(("args", "problem"), BAD_ARGS)
def test_http_refuses_args_that_do_not_fit_naming_the_field(request, database_url, served, args, problem):
    """A server without MODULE:APP checks by the stored description; one with it, by its code's."""
    client = local_client(request.getfixturevalue(served).asgi())
    before = store_size(database_url)
    response = client.post("/api/v1/runs", json={"task": TASK, "args": args})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "args"
    assert problem in response.json()["detail"]
    good = {"task": TASK, "args": {"x": 1, "y": 2}}
    batch = client.post("/api/v1/runs/batch", json={"runs": [good, {"task": TASK, "args": args}]})
    assert (batch.status_code, batch.json()["field"]) == (422, "runs.1.args")
    assert store_size(database_url) == before
    assert client.post("/api/v1/runs", json=good).status_code == 201


def test_http_suggests_the_registered_name(bare, database_url):
    client = local_client(bare.asgi())
    before = store_size(database_url)
    response = client.post("/api/v1/runs", json={"task": "add", "args": {"x": 1, "y": 2}})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "task"
    assert response.json()["detail"] == "unknown task 'add'; did you mean 'tasks.add'?"
    assert store_size(database_url) == before
