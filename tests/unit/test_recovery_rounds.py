"""The rounds of recovery, pure: K runs that crashed with a poison among them come back in O(log K) rounds.

A small model of workers and rounds drives the two rules as the store does:
`admit` (a worker runs one group of suspects at a time, beside other work)
and `rescue_lost` (a crash is charged to its only started suspect; the rest
go back in halves). Each round every worker, idle at its start, claims from
the queue in claim order; the worker holding the poison crashes and the
sweep rescues its runs; every other run completes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.domain.admission import Candidate, LocalUsage, admit
from tidegate.domain.recovery import LostAttempt, rescue_lost
from tidegate.domain.scopes import Rules

POISON = "r000"


@dataclass
class Run:
    id: str
    order: float
    max_attempts: int
    attempt: int = 0
    status: str = "queued"
    suspect: bool = False
    group: str | None = None
    charged: list[int] = field(default_factory=list)


@dataclass
class Outcome:
    runs: dict[str, Run]
    rounds: int  # rounds after the first crash until every run ended
    innocents_done: int  # the round by which every innocent run had completed
    uncharged_suspect_crashes: int  # crashes of the poison, as a suspect, that charged nothing


def _crash(runs: dict[str, Run], taken: list[Run], worker: str, unstarted: set[str]) -> None:
    """The poison's worker died with `taken` on it: the sweep rescues them all, as one crash."""
    lost = [
        LostAttempt(
            run.id,
            run.attempt,
            run.max_attempts,
            worker,
            lapsed=False,
            started=run.suspect or run.id not in unstarted,  # a suspect's start is recorded before its body
            suspect=run.suspect,
            beside=len(taken) - 1,
        )
        for run in taken
    ]
    for _, verdict in rescue_lost(lost):
        run = runs[verdict.run_id]
        run.status, run.suspect, run.group, run.max_attempts = (
            verdict.status,
            verdict.suspect,
            verdict.group,
            verdict.max_attempts,
        )
        if verdict.charged:
            run.charged.append(run.attempt)


def simulate(
    k: int, workers: int, capacity: int, max_attempts: int, unstarted: set[str], arrivals: list[int]
) -> Outcome:
    """K runs, the first a poison, crash their worker together; then rounds until all ended.
    `arrivals[i]`: fresh runs submitted before round i (younger than every rescued run)."""
    runs = {f"r{i:03}": Run(f"r{i:03}", float(i), max_attempts) for i in range(k)}
    for run in runs.values():
        run.attempt = 1
    _crash(runs, list(runs.values()), "w0", unstarted)
    rounds = innocents_done = uncharged = 0
    while any(run.status == "queued" for run in runs.values()):
        rounds += 1
        assert rounds < 10 * (k + max_attempts + sum(arrivals)) + 50, "recovery does not converge"
        for n in range(arrivals[rounds - 1] if rounds <= len(arrivals) else 0):
            run = Run(f"f{rounds:03}-{n}", 1000.0 + rounds + n / 100, max_attempts)
            runs[run.id] = run
        taken_by: list[list[Run]] = []
        for _ in range(workers):
            queued = sorted((r for r in runs.values() if r.status == "queued"), key=lambda r: r.order)
            candidates = [
                Candidate(r.id, "t", "q", "", {}, 0, r.order, suspect=r.suspect, group=r.group) for r in queued
            ]
            decision = admit(candidates, {}, Rules(), LocalUsage(), capacity)
            taken = [runs[candidate.id] for candidate, _ in decision.admitted]
            for run in taken:
                run.status, run.attempt = "running", run.attempt + 1
            taken_by.append(taken)
        for index, taken in enumerate(taken_by):
            if any(run.id == POISON for run in taken):
                was_suspect = runs[POISON].suspect
                charged_before = len(runs[POISON].charged)
                _crash(runs, taken, f"w{rounds}-{index}", unstarted)
                uncharged += was_suspect and len(runs[POISON].charged) == charged_before
            else:
                for run in taken:
                    run.status, run.suspect, run.group = "completed", False, None
        if innocents_done == 0 and all(r.status == "completed" for r in runs.values() if r.id != POISON):
            innocents_done = rounds
    return Outcome(runs, rounds, innocents_done, uncharged)


def _check_isolation(outcome: Outcome, max_attempts: int) -> None:
    poison = outcome.runs[POISON]
    assert poison.status == "failed"
    assert len(poison.charged) == max_attempts, poison  # charged on each crash that was surely its own
    for run in outcome.runs.values():
        if run.id != POISON:
            assert run.status == "completed" and not run.charged, run  # an innocent is never charged


@settings(max_examples=200, deadline=None)
@given(
    k=st.integers(1, 64),
    max_attempts=st.integers(1, 4),
    unstarted=st.sets(st.integers(0, 63)),
)
def test_k_suspects_with_one_poison_come_back_in_log_k_rounds(k, max_attempts, unstarted):
    """Two workers with room for all K: every innocent is back within ceil(log2 K) + 1 rounds (not
    K: a worker runs a whole group), and the poison crashes uncharged, as a suspect, at most
    ceil(log2 K) times before it is cornered."""
    outcome = simulate(
        k, workers=2, capacity=k, max_attempts=max_attempts, unstarted={f"r{i:03}" for i in unstarted}, arrivals=[]
    )
    _check_isolation(outcome, max_attempts)
    log_k = math.ceil(math.log2(k)) if k > 1 else 0
    assert outcome.uncharged_suspect_crashes <= log_k
    assert outcome.innocents_done <= log_k + 1 or k == 1


@settings(max_examples=200, deadline=None)
@given(
    k=st.integers(1, 40),
    workers=st.integers(1, 4),
    capacity=st.integers(1, 10),
    max_attempts=st.integers(1, 4),
    unstarted=st.sets(st.integers(0, 39)),
    arrivals=st.lists(st.integers(0, 5), max_size=12),
)
def test_any_fleet_fails_only_the_poison_while_fresh_work_runs_beside_suspects(
    k, workers, capacity, max_attempts, unstarted, arrivals
):
    """Few workers, small capacities, fresh runs arriving beside the suspects: still only the
    poison is charged, exactly `max_attempts` times, and its suspect crashes stay O(log K)."""
    outcome = simulate(k, workers, capacity, max_attempts, {f"r{i:03}" for i in unstarted}, arrivals)
    _check_isolation(outcome, max_attempts)
    assert outcome.uncharged_suspect_crashes <= (math.ceil(math.log2(k)) if k > 1 else 0)
