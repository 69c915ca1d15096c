"""All-or-none multi-pool claims under contention from three processes (`tests/apps/pool_contender.py`).

Each process loops over overlapping requests ({a,b}, {b,c}, {a,c}, {c:2},
{a,b,c}) with pools a=1, b=1, c=2, so a claimer that took its pools one by
one would deadlock or hold part of a set. While they run, the test samples
the holder table (one statement: a consistent snapshot) and afterwards checks
the hold intervals the processes logged, which lie inside their real holds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tidegate.domain.model import CycleRequest

from .conftest import REPO_ROOT, execute_sql

QUEUE = "contended"
LIMITS = {"a": 1, "b": 1, "c": 2}
PROCESSES = 3
ITERATIONS = 120


def needs_of(step_key: str) -> dict[str, int]:
    pools = step_key.split(".")[0].split("-")
    return {"c": 2} if pools == ["c"] else dict.fromkeys(pools, 1)


def check_holders_snapshot(database_url: str) -> None:
    """One read of the holder table (a consistent snapshot): no step holds part of its pools, no pool is over."""
    rows = execute_sql(
        database_url, "SELECT holder, scope, slots FROM tidegate_holders WHERE substr(scope, 1, 5) = 'pool:'"
    )
    held: dict[str, dict[str, int]] = {}
    for holder, scope, slots in rows:
        held.setdefault(holder.split("/", 1)[1], {})[scope[len("pool:") :]] = slots
    for key, pools in held.items():
        assert pools == needs_of(key), f"step {key} held {pools}: part of its pools"
    for pool, limit in LIMITS.items():
        assert sum(pools.get(pool, 0) for pools in held.values()) <= limit


def peak_use(intervals: list[tuple[str, float, float]], pool: str) -> int:
    """The most slots of `pool` the logged hold intervals (step key, start, end) ever held at once."""
    edges = []
    for key, start, end in intervals:
        slots = needs_of(key).get(pool, 0)
        if slots:
            edges += [(start, slots), (end, -slots)]
    in_use = peak = 0
    for _, delta in sorted(edges, key=lambda edge: (edge[0], edge[1])):  # a release before a claim at a tie
        in_use += delta
        peak = max(peak, in_use)
    return peak


def test_three_processes_never_hold_part_of_their_pools_nor_exceed_a_limit(app, database_url, tmp_path: Path):
    @app.task(name="t.contended", queue=QUEUE)
    def contended() -> None:
        return None

    for pool, limit in LIMITS.items():
        app.set_pool_limit(pool, limit, lease_duration="5m")
    for _ in range(PROCESSES):
        contended.submit()
    runs = app.store.cycle(CycleRequest("parent", [QUEUE], [], [], PROCESSES, 300)).claimed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    logs = [tmp_path / f"holds-{index}.log" for index in range(PROCESSES)]
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.apps.pool_contender",
                database_url,
                run.id,
                str(run.attempt),
                f"w{index}",
                str(logs[index]),
                str(ITERATIONS),
                str(index),
            ],
            cwd=REPO_ROOT,
            env=env,
            stderr=subprocess.PIPE,
        )
        for index, run in enumerate(runs)
    ]
    snapshots = 0
    try:
        deadline = time.monotonic() + 120  # a deadlock shows as this bound passing
        while any(process.poll() is None for process in processes):
            assert time.monotonic() < deadline, "contenders did not finish: deadlock or starvation"
            check_holders_snapshot(database_url)
            snapshots += 1
            time.sleep(0.005)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait(30)
    for process in processes:
        assert process.returncode == 0, process.stderr.read().decode() if process.stderr else ""
    assert snapshots > 0

    intervals = []
    for log in logs:
        lines = log.read_text().split()
        entries = [(lines[i], float(lines[i + 1]), float(lines[i + 2])) for i in range(0, len(lines), 3)]
        assert len(entries) == ITERATIONS  # every claim was granted in the end
        intervals += entries
    for pool, limit in LIMITS.items():
        peak = peak_use(intervals, pool)
        assert peak <= limit, f"pool {pool} reached {peak} slots of {limit}"
        assert peak == limit  # the pool was really contended
    assert app.store.pools() and all(status.claimed == 0 for status in app.store.pools())
