"""A workflow run's Steps tab draws its DAG in Chromium (live server and worker, SQLite and PostgreSQL).

`etl.diamond` (tests/apps/dashboard_tasks.py) runs with 3 of its 10 mapped
items held on a gate, so the drawing shows every kind of state at once; then
the gate opens and the drawing follows without a reload.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import Site, shoot
from tests.conftest import wait_until
from tidegate.domain.steps import StepStatus

pytestmark = pytest.mark.browser
LIVE = 15_000  # ms a live update may take on a loaded machine
OK_BG = "rgb(232, 246, 238)"  # --ok-bg: the completed badge's background
NARROW = 480


def _items(site: Site, run_id: str, status: StepStatus) -> int:
    return sum(1 for s in site.app.store.run_steps(run_id) if s.map_key == "shard" and s.status is status)


def test_a_workflow_runs_steps_tab_draws_its_dag_and_follows_the_run(operator: Any, site: Site) -> None:
    gate = site.gate()
    run = site.app.tasks["etl.diamond"].submit(n=10, gate=gate, held=7)
    wait_until(lambda: _items(site, run.id, StepStatus.COMPLETED) == 7, message="7 of 10 items done")
    operator.goto(f"{site.base}/runs/{run.id}?tab=steps")

    dag = operator.get_by_role("group", name=re.compile(r"Steps of workflow etl\.diamond: 4 nodes, 4 dependencies"))
    expect(dag).to_be_visible()
    expect(dag.locator("g.dag-node")).to_have_count(4)
    expect(dag.locator("path.dag-edge")).to_have_count(4)
    extract = dag.locator('g.dag-node[data-key="extract"]')
    expect(extract).to_have_attribute("data-state", "completed")
    expect(extract.locator("rect").first).to_have_css("fill", OK_BG)  # the badges' colour, and the word too
    expect(extract).to_contain_text("completed")
    shard = dag.locator('g.dag-node[data-key="shard"]')
    expect(shard).to_have_attribute("data-state", "running")
    expect(shard).to_contain_text("7/10 done")
    expect(shard.locator("title")).to_have_text("shard: mapped, 7/10 done · after extract")
    expect(dag.locator('g.dag-node[data-key="load"]')).to_have_attribute("data-state", "pending")
    shoot(operator, site, "run-dag")

    extract.click()  # a node leads to its row in the table below
    expect(operator).to_have_url(re.compile(r"#step-extract$"))
    expect(operator.locator("tr#step-extract")).to_be_visible()

    operator.set_viewport_size({"width": NARROW, "height": 900})  # narrow: the drawing scrolls in its own box
    wrap = operator.locator('[data-testid="dag"]')
    assert wrap.evaluate("e => e.scrollWidth > e.clientWidth")
    assert wrap.evaluate("e => e.getBoundingClientRect().right") <= NARROW
    operator.set_viewport_size({"width": 1280, "height": 900})

    site.open_gate(gate)
    expect(dag.locator('g.dag-node[data-key="load"]')).to_have_attribute("data-state", "completed", timeout=LIVE)
    expect(shard).to_contain_text("10/10 done")
