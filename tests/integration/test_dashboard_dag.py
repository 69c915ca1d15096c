"""The Steps tab draws a workflow run's DAG (dashboard/graph.py) from the served app, on both backends."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tests.apps.dashboard_tasks import make_app
from tidegate import App
from tidegate.api import Tokens, create_api
from tidegate.cli.main import app as cli
from tidegate.dashboard.graph import row_id
from tidegate.domain.model import CycleRequest, WorkerRegistration
from tidegate.domain.steps import StepStatus, StepUpdate

READ = "read-token"


@pytest.fixture
def served(database_url: str) -> Iterator[App]:
    app = make_app(database_url)
    app.enqueue([])
    try:
        yield app
    finally:
        app.close()


def steps_tab(app: App, run_id: str) -> str:
    browser = TestClient(create_api(app, tokens=Tokens("full-token", READ)), base_url="http://127.0.0.1")
    browser.post("/login", data={"token": READ, "next": "/"}, follow_redirects=False)
    answer = browser.get(f"/runs/{run_id}?tab=steps")
    assert answer.status_code == 200
    return answer.text


def node(page: str, key: str) -> str:
    found = re.search(rf'<g class="dag-node [^"]*" data-key="{re.escape(key)}"[^>]*>(.*?)</g>', page, re.S)
    assert found, f"no node {key}"
    return found.group(0)


def test_a_diamond_runs_steps_tab_draws_its_nodes_states_and_dependencies(served: App) -> None:
    run = served.tasks["etl.diamond"].submit(n=3, gate="-", held=2)
    served.store.register_worker(WorkerRegistration("w1", 1, ["etl"], False, 60))
    assert len(served.store.cycle(CycleRequest("w1", ["etl"], [], [], 1, 30.0)).claimed) == 1
    done, running = StepStatus.COMPLETED, StepStatus.RUNNING
    updates = [StepUpdate("extract", done, output=[0, 1, 2]), StepUpdate("audit", done, output=3)]
    updates += [StepUpdate(f"shard[{i}]", done if i < 2 else running, "shard", i, output=i * 2) for i in range(3)]
    assert served.store.record_steps((run.id, 1), updates)
    page = steps_tab(served, run.id)

    assert re.search(r'<svg class="dag" role="group" aria-labelledby="dag-title"', page)
    assert '<title id="dag-title">Steps of workflow etl.diamond: 4 nodes, 4 dependencies</title>' in page
    edges = set(re.findall(r'class="dag-edge" data-source="([^"]+)" data-target="([^"]+)"', page))
    assert edges == {("extract", "shard"), ("extract", "audit"), ("shard", "load"), ("audit", "load")}
    assert 'data-state="completed"' in node(page, "extract") and "<title>extract: completed</title>" in page
    shard = node(page, "shard")
    assert 'data-state="running"' in shard and "2/3 done" in shard and "map · " in shard
    assert 'data-state="pending"' in node(page, "load")  # no row yet: not started
    # Each recorded node links to its row in the table below; the map to its first item's row.
    assert '<a href="#step-extract" class="dag-link">' in page and '<tr id="step-extract">' in page
    assert '<a href="#step-shard_5b0_5d" class="dag-link">' in page and '<tr id="step-shard_5b0_5d">' in page
    assert page.index('data-testid="dag"') < page.index(
        '<table class="grid compact" aria-label="Steps"'
    )  # the drawing, then the table


def test_a_plain_tasks_run_draws_nothing_and_an_unbuilt_workflow_is_still_drawn(served: App) -> None:
    plain = served.tasks["gated.hold"].submit(gate="-")
    page = steps_tab(served, plain.id)
    assert 'data-testid="dag"' not in page and "No steps" in page
    queued = served.tasks["etl.diamond"].submit(n=2, gate="-", held=0)  # no worker took it: no step rows
    page = steps_tab(served, queued.id)
    assert page.count('data-state="pending"') == 4 and "No steps" not in page
    assert 'class="dag-link"' not in page  # no row to link to yet


def test_a_map_item_taken_into_its_window_but_not_started_shows_queued_not_running(served: App) -> None:
    """`next_map_item` stores an item running once it holds its window slot, before its function
    starts (no started time): the Steps tab and `runs show` call it queued until it starts."""
    run = served.tasks["etl.diamond"].submit(n=3, gate="-", held=2)
    served.store.register_worker(WorkerRegistration("w1", 1, ["etl"], False, 60))
    assert len(served.store.cycle(CycleRequest("w1", ["etl"], [], [], 1, 30.0)).claimed) == 1
    fence = (run.id, 1)
    pending = [StepUpdate(f"shard[{i}]", StepStatus.PENDING, "shard", i) for i in range(3)]
    assert served.store.record_steps(fence, [StepUpdate("extract", StepStatus.COMPLETED, output=[0, 1, 2]), *pending])
    taken = [served.store.next_map_item(fence, "w1", "shard", 3) for _ in range(2)]
    assert [item.step_key for item in taken if item is not None] == ["shard[0]", "shard[1]"]
    assert served.store.record_steps(fence, [StepUpdate("shard[0]", StepStatus.RUNNING, "shard", 0)])  # it starts
    page = steps_tab(served, run.id)

    def shown(key: str) -> str:
        row = re.search(rf'<tr id="{re.escape(row_id(key))}">(.*?)</tr>', page, re.S)
        assert row, f"no row {key}"
        found = re.search(r'class="badge s-([a-z]+)"', row.group(1))
        assert found
        return found.group(1)

    assert [shown(f"shard[{i}]") for i in range(3)] == ["running", "queued", "pending"]
    assert 'data-state="running"' in node(page, "shard")  # one item is under way
    result = CliRunner().invoke(
        cli, ["runs", "show", run.id, "--database", served.store.url], env={"COLUMNS": "200", "NO_COLOR": "1"}
    )
    assert result.exit_code == 0, result.output
    cells = [line.split() for line in result.stdout.splitlines() if line.strip().startswith("shard[")]
    rows = {cell[0]: cell[1] for cell in cells}
    assert rows == {"shard[0]": "running", "shard[1]": "queued", "shard[2]": "pending"}


def test_a_map_of_children_shows_done_of_its_total_and_its_window(database_url: str) -> None:
    """`wf.map_children` starts only its window of children: the node counts the map's items, not
    the children started so far, and says how many run at once."""
    from tests.apps.child_window import make_app as window_app

    app = window_app(database_url)
    try:
        run = app.tasks["window.flow"].submit(items=6, concurrency=3, log="-", gate="-", seconds=0.0)
        page = steps_tab(app, run.id)
        drawn = node(page, "child.window.item")
        assert "0/6 done · 3 at once" in drawn, drawn  # was "no items yet", then "0/3 done" once 3 started
    finally:
        app.close()


def test_a_server_without_the_runs_task_says_so_rather_than_calling_it_a_plain_function(database_url: str) -> None:
    """A server started before a workflow was added (or without MODULE:APP): a `wf.map_children`
    run has children but no step row, and the page must not call its task a plain function."""
    from tests.apps.child_window import make_app as window_app

    code = window_app(database_url)
    bare = App(database_url)
    try:
        run = code.tasks["window.flow"].submit(items=2, concurrency=1, log="-", gate="-", seconds=0.0)
        page = steps_tab(bare, run.id)
        assert "The served app does not define window.flow" in page
        assert "plain function" not in page
    finally:
        bare.close()
        code.close()
