"""A rate lowered live, under load: worker processes drain a rated queue and an operator lowers its
rate mid-drain (`limits set rate:paced@1s 20`, through the engine's operator service, as the CLI,
the API and the dashboard do).

The promise (docs/rates.md, `domain.live_rates`): tokens already granted are not taken back, and
every start after the change is charged the new interval against the state the old rate left, so
no window of length `per` that begins at or after the change holds more than the new limit. The
instants are the ones the claims charged, stored with each run's charge on the database's clock;
the change's instant is read from that clock once `set_limit` has committed, so every claim
charged after it read the new rules (a claim that read the old ones held the rules fence, or the
single writer, the change waited for).

The mutation check runs the same drain with the claim ignoring live rate overrides
(`$TIDEGATE_TEST_IGNORE_LIVE_RATES`) and sees the new limit exceeded.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.apps.rates import RATE, database_time, make_app, most_in_a_window
from tidegate import RunStatus
from tidegate.domain.rates import NS, Charge
from tidegate.engine.operators import limits

from .conftest import execute_sql

pytestmark = pytest.mark.slow

NEW_LIMIT = 20  # per second, from the declared 50 (burst 10 -> 4: a steady 17/s)
TARGET = "rate:paced@1s"  # the queue's one-second window, every partition of it
SIZES = {"postgres": (2, 160), "sqlite": (2, 140)}  # (processes, runs): about 50 before the change, the rest after
BEFORE = 50  # runs charged before the change


def _charged(database_url):
    """{run id: the instant its start was charged, on the database's clock} of every charged run."""
    found = {}
    for run_id, stored in execute_sql(database_url, "SELECT id, rate_charge FROM tidegate_runs"):
        charges = [Charge.from_json(item) for item in json.loads(stored or "[]")]
        if charges and charges[0].at is not None:
            found[run_id] = charges[0].at / NS
    return found


def _drain_and_lower(database_url, worker_processes, tmp_path, env=None):
    """Drain one partition with worker processes, lower the rate once BEFORE runs were charged;
    returns (charge instants, the change's instant)."""
    processes, runs = SIZES["postgres" if database_url.startswith("postgres") else "sqlite"]
    with make_app(database_url) as app:
        app.tasks["rates.tick"].submit_many([{"p": 0}] * runs)
        spawned = [
            worker_processes.spawn(
                "tests.apps.rates:app", database_url, max_workers=16, drain=True,
                env={"TIDEGATE_TEST_LOG": str(tmp_path / "starts.log"), **(env or {})},
            )
            for _ in range(processes)
        ]  # fmt: skip
        deadline = time.monotonic() + 60
        while len(_charged(database_url)) < BEFORE:
            assert time.monotonic() < deadline, "the drain never reached the change"
            time.sleep(0.02)
        change = limits.set_limit(app.store, TARGET, NEW_LIMIT)
        changed_at = database_time(database_url)  # after the commit: every later charge read the new rules
        assert (change.old, change.new) == (RATE.limit, NEW_LIMIT)
        worker_processes.wait_drained(spawned, timeout=90)
        counts = app.store.status_counts()
        assert counts[RunStatus.COMPLETED] == runs == sum(counts.values()), counts
    charged = _charged(database_url)
    assert len(charged) == runs
    return charged, changed_at


def test_a_rate_lowered_mid_drain_holds_every_window_after_the_change(database_url, worker_processes, tmp_path):
    charged, changed_at = _drain_and_lower(database_url, worker_processes, tmp_path)
    before = [at for at in charged.values() if at < changed_at]
    after = [at for at in charged.values() if at >= changed_at]
    most_after = most_in_a_window(after, 1.0)
    print(f"before {len(before)} (most in 1 s {most_in_a_window(before, 1.0)}), after {len(after)} (most {most_after})")
    assert most_in_a_window(before, 1.0) > NEW_LIMIT  # the old rate bound more loosely: the change matters
    assert most_in_a_window(before, 1.0) <= RATE.limit
    assert len(after) > 2 * NEW_LIMIT  # the drain ran on for more than two windows under the new rate
    assert most_after <= NEW_LIMIT, most_after
    assert most_after >= NEW_LIMIT - 5  # and the new limit bound (a steady 17/s plus its burst of 4)


def test_the_proof_fails_when_the_claim_ignores_the_live_rate(database_url, worker_processes, tmp_path):
    charged, changed_at = _drain_and_lower(
        database_url, worker_processes, tmp_path, env={"TIDEGATE_TEST_IGNORE_LIVE_RATES": "1"}
    )
    assert most_in_a_window([at for at in charged.values() if at >= changed_at], 1.0) > NEW_LIMIT
