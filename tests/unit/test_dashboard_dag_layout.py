"""The Steps tab's DAG layout (dashboard/dag.py) and node states (dashboard/graph.py), without a server."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from tidegate.dashboard.dag import Box, layers, layout
from tidegate.dashboard.graph import _drawn, _summary, row_id, run_graph
from tidegate.domain.children import ChildRecord
from tidegate.domain.model import RunStatus
from tidegate.domain.steps import StepRecord, StepStatus
from tidegate.workflow.builder import CHILD_SPAN, ChildNode, MapNode
from tidegate.workflow.definitions import WorkflowDefinition
from tidegate.workflow.executors import Executor


@st.composite
def dags(draw: st.DrawFn) -> list[tuple[str, tuple[str, ...]]]:
    """Nodes in build order, each depending on any earlier ones (and maybe on a key not drawn)."""
    count = draw(st.integers(0, 14))
    nodes: list[tuple[str, tuple[str, ...]]] = []
    for index in range(count):
        earlier = [key for key, _ in nodes] + ["elsewhere"]
        deps = draw(st.lists(st.sampled_from(earlier), max_size=4)) if earlier else []
        nodes.append((f"n{index}", tuple(deps)))
    return nodes


def _overlap(a: Box, b: Box) -> bool:
    return a.x < b.x + b.width and b.x < a.x + a.width and a.y < b.y + b.height and b.y < a.y + a.height


@given(dags())
def test_edges_point_to_later_layers_boxes_never_overlap_and_fit_the_drawing(
    nodes: list[tuple[str, tuple[str, ...]]],
) -> None:
    drawn = layout(nodes)
    assert list(drawn.boxes) == [key for key, _ in nodes]
    for edge in drawn.edges:
        assert drawn.boxes[edge.source].layer < drawn.boxes[edge.target].layer
        assert drawn.boxes[edge.source].x + drawn.boxes[edge.source].width < drawn.boxes[edge.target].x
    wanted = {(dep, key) for key, deps in nodes for dep in deps if dep != "elsewhere"}
    assert {(edge.source, edge.target) for edge in drawn.edges} == wanted  # one edge per dependency, no more
    boxes = list(drawn.boxes.values())
    for i, a in enumerate(boxes):
        assert a.x >= 0 and a.x + a.width <= drawn.width and a.y >= 0 and a.y + a.height <= drawn.height
        assert not any(_overlap(a, b) for b in boxes[i + 1 :])
    assert layout(list(nodes)) == drawn  # deterministic


def test_a_diamond_is_three_layers_with_the_middle_in_definition_order() -> None:
    nodes = [("extract", ()), ("shard", ("extract",)), ("audit", ("extract",)), ("load", ("shard", "audit"))]
    assert layers(nodes) == {"extract": 0, "shard": 1, "audit": 1, "load": 2}
    boxes = layout(nodes).boxes
    assert boxes["shard"].y < boxes["audit"].y and boxes["shard"].x == boxes["audit"].x
    middle = (boxes["shard"].y + boxes["audit"].y) / 2
    assert boxes["extract"].y == boxes["load"].y == middle  # the lone nodes are centred: it reads as a diamond
    assert layout([]).boxes == {} and layout([]).edges == []


def test_a_layer_is_the_longest_path_from_a_root() -> None:
    assert layers([("a", ()), ("b", ("a",)), ("c", ("b",)), ("d", ("a", "c"))])["d"] == 3


def _item(key: str, index: int, status: StepStatus) -> StepRecord:
    return StepRecord("r1", f"{key}[{index}]", key, index, status, None, None, 1, datetime.now(UTC), None)


def test_a_map_counts_its_items_and_links_to_its_first_row() -> None:
    node = MapNode("shard", None, (), {}, None, ("extract",))  # type: ignore[arg-type]  # the step is not drawn
    statuses = [StepStatus.COMPLETED] * 7 + [StepStatus.RUNNING] * 3
    rows = {"shard": [_item("shard", i, status) for i, status in enumerate(statuses)]}
    drawn = _drawn(node, {}, rows, [], "/runs/r1")
    assert (drawn.state, drawn.detail, drawn.href) == ("running", "7/10 done", f"#{row_id('shard[0]')}")
    assert drawn.tooltip == "shard: mapped, 7/10 done · after extract"
    assert _drawn(node, {}, {}, [], "/runs/r1").detail == "no items yet"


def test_child_nodes_link_to_their_child_run_or_the_children_tab() -> None:
    def child(index: int, status: RunStatus) -> ChildRecord:
        return ChildRecord(f"c{index}", index, "t", "q", {}, status, True)

    one = ChildNode("child.t", object(), None, {}, None, None, 1, ())
    children = [child(0, RunStatus.COMPLETED), child(CHILD_SPAN, RunStatus.QUEUED)]
    drawn = _drawn(one, {}, {}, children, "/p/runs/r1")
    assert (drawn.state, drawn.detail, drawn.href) == ("queued", "queued", "/p/runs/c100000")
    many = ChildNode("child.t:2", object(), (1, 2), {}, None, None, 0, ())
    drawn = _drawn(many, {}, {}, [*children, child(1, RunStatus.FAILED)], "/p/runs/r1")
    assert (drawn.state, drawn.detail, drawn.href) == ("failed", "1/2 done", "/p/runs/r1?tab=children")


def test_a_group_is_failed_running_completed_or_pending() -> None:
    assert _summary(["completed", "completed"], True) == ("completed", "2/2 done")
    assert _summary(["completed", "pending"], True)[0] == "running"
    assert _summary(["pending"], True) == ("pending", "0/1 done")
    assert _summary(["canceled", "completed"], True)[0] == "canceled"


def test_row_ids_keep_keys_apart_and_out_of_html_syntax() -> None:
    keys = ["shard", "shard:2", "shard[0]", "shard:2[10]", "a.b-c"]
    ids = [row_id(key) for key in keys]
    assert len(set(ids)) == len(ids) and all(":" not in i and "[" not in i for i in ids)


def test_a_run_the_served_app_cannot_rebuild_or_lacks_says_why_and_a_plain_tasks_run_draws_nothing() -> None:
    def broken(wf: object, n: int) -> None:
        raise ValueError(f"no rows for {n}")

    definition = WorkflowDefinition("etl.broken", broken, "wf", Executor.parallel())
    app = SimpleNamespace(tasks={"etl.broken": SimpleNamespace(workflow_definition=definition), "plain": object()})
    row = [_item("shard", 0, StepStatus.COMPLETED)]

    def graph(task: str, steps: list[StepRecord]) -> object:
        return run_graph(app, SimpleNamespace(id="r1", task=task, args={"n": 3}), steps, [], "")  # type: ignore[arg-type]

    assert (
        graph("etl.broken", row) == "Workflow etl.broken could not be rebuilt to draw it (ValueError: no rows for 3)."
    )
    lacking = (
        "The served app does not define gone (served without MODULE:APP, or started before that code): "
        "a workflow's DAG cannot be drawn; restart the server with the current code."
    )
    assert graph("gone", row) == lacking
    assert graph("gone", []) == lacking  # a map of children has no step row: still not "a plain function"
    assert graph("plain", row) is None
