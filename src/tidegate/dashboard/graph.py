"""The Steps tab's DAG: which nodes a workflow run has, what each depends on, and each node's state.

Step rows do not store dependencies, so the graph comes from where the worker
gets it: the served app's workflow function, rebuilt with the run's stored
args (`build_dag`, as every attempt of the run does; building only describes
the run, no step executes). States come from the store: a step's row, a map's
item rows (`map_key`), a child node's children (its `CHILD_SPAN` of indexes).
A run whose task the served app does not define, or whose function fails
to build, gets no drawing (the page says why) and keeps its steps table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tidegate.app import App
from tidegate.dashboard.dag import Layout, layout
from tidegate.domain.children import ChildRecord
from tidegate.domain.model import RunRecord
from tidegate.domain.pools import step_key
from tidegate.domain.steps import StepRecord
from tidegate.workflow.builder import CHILD_SPAN, ChildNode, MapNode, Node, StepRef, build_dag

KEY_CHARS = 22  # longest step key drawn in full in a box (the tooltip and the table have all of it)


@dataclass(frozen=True, slots=True)
class Drawn:
    """A node as drawn: its state (a status of the badge palette) and where it links to."""

    key: str
    kind: str  # step, map, child
    state: str
    detail: str  # "7/10 done" for a map or children (and its concurrency: "· 3 at once"), else the state's word
    href: str  # its row in the steps table, or the child run(s)
    tooltip: str
    done: float | None = None  # the share of a map's items (or of the children) done: a bar in the box

    @property
    def label(self) -> str:
        return self.key if len(self.key) <= KEY_CHARS else self.key[: KEY_CHARS - 1] + "…"


@dataclass(frozen=True, slots=True)
class Graph:
    nodes: dict[str, Drawn]
    layout: Layout


def row_id(key: str) -> str:
    """The HTML id of a step's row in the steps table (keys hold ':' and '[': kept out of ids)."""
    return "step-" + "".join(ch if ch.isalnum() or ch in "._-" else f"_{ord(ch):x}" for ch in key)


def run_graph(
    app: App, run: RunRecord, steps: Sequence[StepRecord], children: Sequence[ChildRecord], root: str
) -> Graph | str | None:
    """The run's drawn DAG, why there is none (in words, for the page), or None for a plain task's run.

    A run whose task the served app lacks may be a workflow with no step row yet (`wf.map_children`
    records children, not steps): the words say the app lacks it rather than call it plain."""
    task = app.tasks.get(run.task)
    definition = getattr(task, "workflow_definition", None)
    if task is None:  # whether it is a workflow is unknown here: say so, never guess "a plain function"
        return (
            f"The served app does not define {run.task} (served without MODULE:APP, or started before that "
            "code): a workflow's DAG cannot be drawn; restart the server with the current code."
        )
    if definition is None:
        return None
    try:
        dag = build_dag(definition, run.args)
    except Exception as error:  # the user's function: whatever it raises, the table still shows
        return f"Workflow {run.task} could not be rebuilt to draw it ({type(error).__name__}: {error})."
    rows = {record.step_key: record for record in steps}
    items: dict[str, list[StepRecord]] = {}
    for record in steps:
        if record.map_key is not None:
            items.setdefault(record.map_key, []).append(record)
    drawn = {key: _drawn(node, rows, items, children, f"{root}/runs/{run.id}") for key, node in dag.nodes.items()}
    return Graph(drawn, layout([(key, node.deps) for key, node in dag.nodes.items()]))


def _drawn(
    node: Node,
    rows: dict[str, StepRecord],
    items: dict[str, list[StepRecord]],
    children: Sequence[ChildRecord],
    run_href: str,
) -> Drawn:
    deps = f" · after {', '.join(node.deps)}" if node.deps else ""
    if isinstance(node, ChildNode):
        first = node.ordinal * CHILD_SPAN
        mine = [child for child in children if first <= child.index < first + CHILD_SPAN]
        states = [child.status.value for child in mine]
        many = node.items is not None
        total = _total(node.items, rows) if many else None
        state, detail = _summary(states, many, total, node.concurrency) if many or not mine else (states[0], states[0])
        href = f"{run_href}?tab=children" if many or not mine else run_href.rsplit("/", 1)[0] + f"/{mine[0].id}"
        ids = ", ".join(child.id for child in mine[:3]) + (" …" if len(mine) > 3 else "")
        shown = f" ({ids})" if ids else ""
        tooltip = f"{node.key}: child runs {detail}{shown}{deps}"
        return Drawn(node.key, "child", state, detail, href, tooltip, _share(states, total) if many else None)
    if isinstance(node, MapNode):
        states = [record.shown_status for record in items.get(node.key, [])]
        total = _total(node.items, rows)
        state, detail = _summary(states, True, total, node.concurrency)
        href = f"#{row_id(step_key(node.key, 0))}" if states else ""
        tooltip = f"{node.key}: mapped, {detail}{deps}"
        return Drawn(node.key, "map", state, detail, href, tooltip, _share(states, total))
    record = rows.get(node.key)
    state = record.shown_status if record is not None else "pending"
    waiting = record.waiting_for if record is not None else None
    detail = "waits for " + ", ".join(sorted(waiting)) if waiting else state
    href = f"#{row_id(node.key)}" if record is not None else ""
    return Drawn(node.key, "step", state, detail, href, f"{node.key}: {detail}{deps}")


def _total(items: Sequence[Any] | StepRef | None, rows: dict[str, StepRecord]) -> int | None:
    """How many items a map has: its list, or the output list of the step it maps over once that
    step has it; None while unknown. A concurrency below the count starts only some of the children
    or items, so the rows started so far are not the total."""
    if isinstance(items, StepRef):
        source = rows.get(items.key)
        output = source.output if source is not None else None
        return len(output) if isinstance(output, list) else None
    return len(items) if items is not None else None


def _share(states: Sequence[str], total: int | None) -> float | None:
    of = total if total is not None else len(states)
    return states.count("completed") / of if of else None


def _summary(
    states: Sequence[str], many: bool, total: int | None = None, concurrency: int | None = None
) -> tuple[str, str]:
    """One state for a group (a map's items, a node's children): failed if any failed, else
    running while any is under way, completed when all are, else pending; and its words: done of
    the total (the items not started yet counted), and the concurrency when it holds some back."""
    counts = Counter(states)
    done = counts["completed"]
    of = max(len(states), total or 0)
    if counts["failed"] or counts["canceled"]:
        state = "failed" if counts["failed"] else "canceled"
    elif of and done == of:
        state = "completed"
    elif any(counts[s] for s in ("running", "waiting", "queued")) or done:
        state = "running"
    else:
        state = "pending"
    if not many:
        return state, state
    if not of:
        return state, "no items yet"
    held_back = f" · {concurrency} at once" if concurrency is not None and concurrency < of and done < of else ""
    return state, f"{done}/{of} done{held_back}"
