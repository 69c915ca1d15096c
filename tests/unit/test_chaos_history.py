"""The chaos suite's history checker on hand-made histories: a clean one passes, and each rule
flags the violation crafted for it (so a rule that stopped looking would fail here)."""

from __future__ import annotations

from typing import Any

from chaos import history
from chaos.history import EventFacts, History, RunFacts

LIMITS = {"global": 2, "pool:p": 1}


def start(
    run: str, attempt: int, t: float, pid: int = 1, scopes: tuple[str, ...] = ("global",), step: str | None = None
) -> dict[str, Any]:
    return {"kind": "start", "run": run, "attempt": attempt, "step": step, "pid": pid, "t": t, "scopes": list(scopes)}


def end(run: str, attempt: int, t: float, pid: int = 1, step: str | None = None) -> dict[str, Any]:
    return {"kind": "end", "run": run, "attempt": attempt, "step": step, "pid": pid, "t": t, "scopes": []}


def kill(pid: int, t: float, storm: bool = True) -> dict[str, Any]:
    return {"kind": "kill", "pid": pid, "t": t, "storm": storm}


def ev(type_: str, **metadata: Any) -> EventFacts:
    return EventFacts(type_, metadata)


def clean() -> History:
    """Run a killed once (attempt 1 on pid 1), redone by pid 2; run b completed; run c failed."""
    return History(
        entries=[
            start("a", 1, 0.0, pid=1),
            start("b", 1, 0.1, pid=2),
            kill(1, 0.5),
            end("b", 1, 0.6, pid=2),
            start("a", 2, 3.0, pid=2),
            end("a", 2, 3.2, pid=2),
            start("c", 1, 3.3, pid=2),
            end("c", 1, 3.4, pid=2),
        ],
        runs=[RunFacts("a", "completed", 2), RunFacts("b", "completed", 1), RunFacts("c", "failed", 1, "boom")],
        events={
            "a": [
                ev("RunStarted", attempt=1),
                ev("RunRequeued", attempt=1, reason="worker gone"),
                ev("RunStarted", attempt=2),
                ev("RunCompleted", attempt=2),
            ],
            "b": [ev("RunStarted", attempt=1), ev("RunCompleted", attempt=1)],
            "c": [ev("RunStarted", attempt=1), ev("RunFailed", attempt=1, error="boom")],
        },
        submitted=["a", "b", "c"],
        limits=LIMITS,
        held_slots={"global": 0},
    )


def test_a_clean_history_passes() -> None:
    assert history.check(clean()) == []
    assert history.kills_and_hits(clean().entries) == (1, 1, 0)


def test_a_lost_or_unfinished_run_or_a_failure_without_reason_is_flagged() -> None:
    recorded = clean()
    recorded.submitted = [*recorded.submitted, "ghost"]
    recorded.runs = [RunFacts("a", "running", 2), RunFacts("b", "completed", 1), RunFacts("c", "failed", 1, None)]
    problems = history.check_ends(recorded.runs, recorded.submitted)
    assert [problem.split(":")[0] for problem in problems] == ["lost", "unfinished", "no reason"]


def test_more_executions_than_attempts_and_an_attempt_executed_twice_are_flagged() -> None:
    entries = [start("a", 1, 0.0), end("a", 1, 0.1), start("a", 1, 1.0, pid=2), end("a", 1, 1.1, pid=2)]
    problems = history.check_executions(entries, [RunFacts("a", "completed", 1)])
    assert any(problem.startswith("twice: attempt 1 of run a") for problem in problems)
    assert any(problem.startswith("executions: run a executed 2 times in 1 attempts") for problem in problems)


def test_a_second_accepted_outcome_for_one_attempt_is_flagged() -> None:
    """The zombie's late completion of attempt 1, accepted after its rescue, is the fencing bug."""
    events = {
        "a": [
            ev("RunStarted", attempt=1),
            ev("RunRequeued", attempt=1, reason="lease expired"),
            ev("RunCompleted", attempt=1),
            ev("RunStarted", attempt=2),
            ev("RunCompleted", attempt=2),
        ]
    }
    problems = history.check_completions(events, [RunFacts("a", "completed", 2)])
    assert "outcomes: attempt 1 of run a has 2 accepted outcomes" in problems
    assert "outcomes: run a ended 2 times" in problems
    silent = {"b": [ev("RunStarted", attempt=1)]}  # the row says completed, no event says so
    assert history.check_completions(silent, [RunFacts("b", "completed", 1)]) == [
        "outcomes: run b is completed without an end event"
    ]


def test_a_scope_over_its_limit_is_flagged_by_the_sweep_line() -> None:
    entries = [
        start("a", 1, 0.0),
        start("b", 1, 0.1),
        start("c", 1, 0.2),
        end("a", 1, 1),
        end("b", 1, 1),
        end("c", 1, 1),
    ]
    assert history.check_concurrency(entries, LIMITS) == ["concurrency: global had 3 executions at once, limit 2"]
    touching = [start("a", 1, 0.0), end("a", 1, 1.0), start("b", 1, 1.0), end("b", 1, 2.0)]
    assert history.peaks(history.intervals(touching)) == {"global": 1}  # an end frees before a start at t


def test_a_killed_execution_ends_at_the_kill_and_a_frozen_one_at_its_freeze() -> None:
    step = ("pool:p",)
    killed = [
        start("x", 0, 0.0, pid=7, scopes=step, step="s"),
        kill(7, 1.0),
        start("y", 0, 1.5, pid=8, scopes=step, step="s"),
        end("y", 0, 2.0, pid=8, step="s"),
    ]
    assert history.check_concurrency(killed, LIMITS) == []
    assert history.kills_and_hits(killed) == (1, 1, 1)
    without_the_kill = [entry for entry in killed if entry["kind"] != "kill"]
    assert history.check_concurrency(without_the_kill, LIMITS) == [
        "concurrency: pool:p had 2 executions at once, limit 1"
    ]
    frozen = [
        start("x", 0, 0.0, pid=7, scopes=step, step="s"),
        {"kind": "stop", "pid": 7, "t": 0.5},
        start("y", 0, 3.0, pid=8, scopes=step, step="s"),
        end("y", 0, 3.5, pid=8, step="s"),
        end("x", 0, 4.0, pid=7, step="s"),
    ]
    assert history.check_concurrency(frozen, LIMITS) == []


def test_a_holder_left_after_the_runs_is_flagged() -> None:
    assert history.check_holders({"global": 0, "pool:p": 1}) == [
        "holder left: 1 slots of pool:p held after every run ended"
    ]


def test_an_attempt_charged_without_starting_and_a_failed_innocent_are_flagged() -> None:
    events = {
        "a": [ev("RunRequeued", attempt=1, reason="worker gone")],  # claimed, never started, charged
        "b": [ev("RunRequeued", attempt=1, reason="worker gone", charged=False)],  # the fixed code's way
        "c": [ev("RunRequeued", attempt=1, reason="worker shutting down")],  # a hand-back charges nothing
    }
    events |= {
        "w": [ev("StepStarted", attempt=1), ev("RunRequeued", attempt=1, reason="lease expired")],  # steps ran
        "t": [ev("RunRequeued", attempt=1, reason="worker gone")],  # its body logged a start: it ran
    }
    runs = [RunFacts("a", "completed", 2), RunFacts("b", "completed", 2), RunFacts("i", "failed", 3, "lease expired")]
    assert history.check_innocence(events, runs, ["i"], [start("t", 1, 0.0)]) == [
        "innocent charged: run a charged attempt 1 it never started",
        "innocent failed: run i is failed (lease expired)",
    ]
