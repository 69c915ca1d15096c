"""A named step rate with a pool across worker processes (issue 25): never over the rate, never over
the pool, and a step held back by the rate holds no pool slot while it waits.

Worker processes run `tests.apps.named_rates:app`: workflow runs whose `load` steps each pay the
rate `warehouse_api` (6 starts per second, burst 2) and hold a slot of the pool `warehouse_db`
(2 slots) for 0.3 s. The steps log their start and end on the database's clock; each step row
keeps the instant its grant charged the rate (`rate_charge`, the database's clock). While they run,
the test samples, in one statement (a consistent snapshot), the pool's holders that are at the
same time marked waiting: a step holding a slot while it waits for the rate (slot hoarding).

* At the instants the grants charged the rate, no window of one second holds more than 6; the
  starts the steps logged, each after its charge by the dispatch's lag, hold no more than 6 in
  any window of one second less the largest lag (as in test_rates_processes.py).
* The logged intervals (inside the holds) never overlap more than the pool's 2 slots.
* No snapshot finds a pool holder waiting for the rate.

The mutation check runs the same workload with the slots and the tokens taken in two
transactions (`$TIDEGATE_TEST_SPLIT_STEP_RATES`) and sees the snapshots find hoarding.
PostgreSQL: 3 processes, 4 runs of 10 steps; SQLite: 2 processes, 3 runs of 10.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.apps.gates import max_overlap
from tests.apps.named_rates import LIMIT, PER, POOL, POOL_SLOTS, make_app
from tests.apps.rates import most_in_a_window, prompt_starts
from tidegate import RunStatus
from tidegate.domain.rates import NS, Charge

from .conftest import execute_sql

pytestmark = pytest.mark.slow

SIZES = {"postgres": (3, 4, 10), "sqlite": (2, 3, 10)}  # processes, runs, steps per run

HOARDING = f"""
SELECT count(*), coalesce(sum(CASE WHEN s.waiting_for IS NOT NULL THEN 1 ELSE 0 END), 0)
FROM tidegate_holders AS h
LEFT JOIN tidegate_steps AS s ON h.holder = s.run_id || '/' || s.step_key
WHERE h.scope = 'pool:{POOL}'
"""


def _run(database_url, backend, worker_processes, tmp_path, env=None):
    """Run the workload; returns (starts, intervals, charges, snapshots, hoarded) with times on the
    database's clock: {(run id, step key): start}, [(start, end)], {(run id, step key): charge instant}."""
    processes, runs, items = SIZES[backend]
    log = tmp_path / "steps.log"
    with make_app(database_url) as app:
        handles = [app.tasks["wf.rated"].submit(log=str(log), run=run, items=items) for run in range(runs)]
        spawned = [
            worker_processes.spawn("tests.apps.named_rates:app", database_url, max_workers=2, drain=True, env=env)
            for _ in range(processes)
        ]
        snapshots = hoarded = 0
        deadline = time.monotonic() + 120
        while any(process.poll() is None for process in spawned):
            assert time.monotonic() < deadline, "the workers did not drain: " + worker_processes.output(spawned[0])
            [(held, waiting)] = execute_sql(database_url, HOARDING)
            assert held <= POOL_SLOTS, f"{held} holders of a pool of {POOL_SLOTS}"
            snapshots += 1
            hoarded += int(waiting or 0)
            time.sleep(0.005)
        for process in spawned:
            assert process.returncode == 0, worker_processes.output(process)
        statuses = [handle.status() for handle in handles]
        assert statuses == [RunStatus.COMPLETED] * runs, [worker_processes.output(p) for p in spawned]
    starts: dict[tuple[str, str], float] = {}
    opened: dict[tuple[str, str], float] = {}
    intervals = []
    for line in log.read_text().splitlines():
        kind, run, n, at = line.split()
        key = (handles[int(run)].id, f"load[{n}]")
        if kind == "start":
            starts[key] = opened[key] = float(at)
        else:
            intervals.append((opened.pop(key), float(at)))
    assert len(starts) == runs * items and not opened  # each step ran once, to its end
    charges = {}
    for run_id, step_key, stored in execute_sql(
        database_url, "SELECT run_id, step_key, rate_charge FROM tidegate_steps WHERE rate_charge IS NOT NULL"
    ):
        [charge] = [Charge.from_json(item) for item in (json.loads(stored) if isinstance(stored, str) else stored)]
        assert charge.at is not None
        charges[(run_id, step_key)] = charge.at / NS
    return starts, intervals, charges, snapshots, hoarded


def test_steps_sharing_a_named_rate_and_a_pool_keep_both_and_hoard_no_slot(
    database_url, backend, worker_processes, tmp_path
):
    starts, intervals, charges, snapshots, hoarded = _run(database_url, backend, worker_processes, tmp_path)
    assert set(charges) == set(starts)  # every start was charged once
    most_charged = most_in_a_window(list(charges.values()), PER)
    # Each start comes after its charge by the dispatch's lag: a window of one second less the
    # largest lag holds starts charged within one second (over the starts that did not stall).
    prompt, largest_lag, stalled = prompt_starts(starts, charges)
    shortened = PER - largest_lag
    most_started = most_in_a_window(list(prompt.values()), shortened)
    peak = max_overlap(intervals)
    print(
        f"charged {most_charged}/1s, started {most_started}/{shortened:.3f}s ({stalled} stalled),"
        f" pool peak {peak}, {snapshots} snapshots"
    )
    assert most_charged <= LIMIT, most_charged
    assert most_charged >= LIMIT - 1  # the rate really bound
    assert most_started <= LIMIT, most_started
    assert peak <= POOL_SLOTS, peak
    assert snapshots > 20
    assert hoarded == 0, f"{hoarded} snapshots found a pool slot held by a step waiting for the rate"
    # the processes really shared the rate and the pool (one may start late on a loaded machine)
    dequeued = execute_sql(database_url, "SELECT metadata FROM tidegate_event_log WHERE type = 'RunDequeued'")
    workers = {(json.loads(m) if isinstance(m, str) else m)["worker"] for (m,) in dequeued}
    assert len(workers) >= 2, workers


def test_the_proof_fails_when_slots_and_tokens_are_taken_apart(database_url, backend, worker_processes, tmp_path):
    """The mutation check: slots then tokens in two transactions, and the snapshots see a step hold
    a pool slot while it waits for the rate."""
    *_, hoarded = _run(database_url, backend, worker_processes, tmp_path, env={"TIDEGATE_TEST_SPLIT_STEP_RATES": "1"})
    assert hoarded > 0
