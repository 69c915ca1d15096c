"""Trees of waiting runs across worker processes (issue 13): killed workers lose nothing,
and waiting runs never push a scope past its limit.

Worker processes run `tests.apps.trees:app`: inner nodes on queue `trees`
(limit 3) batch-wait on their children, leaves sleep (some tagged
kind=heavy, limit 2), under a global cap of 6. Each attempt logs when it
executes; a waiting run logs nothing while it waits (it holds no worker).
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.apps import trees
from tests.apps.trees import make_app
from tidegate import RunStatus

from .conftest import wait_until

pytestmark = pytest.mark.slow


def _intervals(path):
    """Per (run, attempt): the list of (start, end) it executed; and what started but never ended."""
    opened: dict[tuple[str, int], float] = {}
    spans: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        kind, run_id, attempt, at = line.split()
        key = (run_id, int(attempt))
        if kind == "start":
            opened[key] = float(at)
        else:
            spans.setdefault(key, []).append((opened.pop(key), float(at)))
    return spans, set(opened)


def _max_overlap(intervals):
    points = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    current = peak = 0
    for _, step in points:
        current += step
        peak = max(peak, current)
    return peak


def _tree_count(depth: int, width: int) -> int:
    return sum(width**level for level in range(depth))


def _check_tree(app, root_id: str, width: int) -> int:
    """Every run of the tree completed and each parent has exactly `width` children: none
    triggered twice by a replay or a rescue. Returns the number of runs in the tree."""
    record = app.run(root_id).info()
    assert record.status is RunStatus.COMPLETED, (root_id, record.status, record.error)
    children = app.store.run_children(root_id)
    if record.task == "trees.leaf" or not children:
        return 1
    assert [child.index for child in children] == list(range(width))
    return 1 + sum(_check_tree(app, child.id, width) for child in children)


def test_sigkill_while_parents_wait_and_their_children_run_loses_nothing(database_url, worker_processes, tmp_path):
    log = tmp_path / "executions.log"
    env = {"TIDEGATE_LEASE_DURATION": "1s", "TIDEGATE_TEST_LOG": str(log)}
    with make_app(database_url) as app:
        node = app.tasks["trees.node"]
        roots = node.submit_many([{"n": n, "depth": 2, "width": 3, "seconds": 0.6} for n in range(4)])
        process = worker_processes.spawn("tests.apps.trees:app", database_url, max_workers=8, env=env)

        def parents_wait_and_children_run() -> bool:
            waiting = app.store.status_counts()[RunStatus.WAITING]
            return waiting >= 1 and bool(_intervals(log)[1])

        wait_until(parents_wait_and_children_run, timeout=60, message="a parent waiting while a child runs")
        worker_processes.kill(process)
        cut_short = _intervals(log)[1]
        assert cut_short  # a leaf was running when its worker died
        assert app.store.status_counts()[RunStatus.WAITING] >= 1  # and a parent was waiting
        worker_processes.spawn("tests.apps.trees:app", database_url, max_workers=8, env=env)
        for n, root in enumerate(roots):
            assert root.wait(timeout=120) == 30 * n + 3  # leaves 10n, 10n+1, 10n+2
        runs = sum(_check_tree(app, root.id, 3) for root in roots)
        assert runs == 4 * _tree_count(2, 3)
        spans, _ = _intervals(log)
        for run_id, attempt in cut_short:  # each attempt cut short was run again, by a later attempt
            assert app.run(run_id).info().attempt > attempt
        attempts = Counter(key for key in spans)
        assert all(count == 1 for count in attempts.values())  # no attempt number executed twice


def test_three_processes_fifty_trees_never_exceed_a_limit(postgres_url, worker_processes, tmp_path):
    database_url = postgres_url
    log = tmp_path / "executions.log"
    env = {"TIDEGATE_TEST_LOG": str(log)}
    with make_app(database_url) as app:
        node = app.tasks["trees.node"]
        shapes = [(2 + n % 2, 2 + n % 3) for n in range(50)]  # depth 2-3, width 2-4
        roots = [node.submit(n=n, depth=depth, width=width, seconds=0.01) for n, (depth, width) in enumerate(shapes)]
        for _ in range(3):
            worker_processes.spawn("tests.apps.trees:app", database_url, max_workers=4, env=env)
        for root in roots:
            root.wait(timeout=300)
        total = sum(_check_tree(app, root.id, width) for root, (_, width) in zip(roots, shapes, strict=True))
        assert total == sum(_tree_count(depth, width) for depth, width in shapes)

        spans, unfinished = _intervals(log)
        assert not unfinished
        runs = {run_id for run_id, _ in spans}
        records = {run_id: app.run(run_id).info() for run_id in runs}
        scopes: dict[str, list[tuple[float, float]]] = {}
        for (run_id, _), intervals in spans.items():
            record = records[run_id]
            needs = ["global", f"queue:{record.queue}"]
            if record.tags.get("kind") == "heavy":
                needs.append("tag:kind=heavy")
            for scope in needs:
                scopes.setdefault(scope, []).extend(intervals)
        peaks = {scope: _max_overlap(intervals) for scope, intervals in scopes.items()}
        assert peaks["global"] <= trees.GLOBAL_CAP, peaks
        assert peaks["queue:trees"] <= trees.TREES_LIMIT, peaks
        assert peaks["tag:kind=heavy"] <= trees.HEAVY_LIMIT, peaks
        assert peaks["global"] >= 2  # the load really ran in parallel
        assert all("RunWaiting" in [e.type for e in app.store.run_events(root.id)] for root in roots)
