"""The Steps tab draws a workflow run's DAG (dashboard/graph.py) from the served app, on both backends."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.apps.dashboard_tasks import make_app
from tidegate import App
from tidegate.api import Tokens, create_api
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
    served.store.register_worker("w1", 1, ["etl"], False, 60)
    assert len(served.store.cycle("w1", ["etl"], [], [], 1, 30.0).claimed) == 1
    done, running = StepStatus.COMPLETED, StepStatus.RUNNING
    updates = [StepUpdate("extract", done, output=[0, 1, 2]), StepUpdate("audit", done, output=3)]
    updates += [StepUpdate(f"shard[{i}]", done if i < 2 else running, "shard", i, output=i * 2) for i in range(3)]
    assert served.store.record_steps((run.id, 1), updates)
    page = steps_tab(served, run.id)

    assert re.search(r'<svg class="dag" role="img" aria-labelledby="dag-title"', page)
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
