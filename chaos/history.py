"""The history checker: pure functions over what a chaos scenario recorded.

Inputs are the task log (JSON lines written by `chaos.apps`: executions with
run, attempt, pid, monotonic time and the scopes they count in), the driver's
own lines in the same log (`kill`, `stop`, `cont` of a worker pid), and what
the store says at the end (runs, their events, the slots still held). Each
rule returns violations as one-line strings; an empty list means the history
is consistent. No I/O here, so every rule is unit-tested on hand-made
histories (tests/unit/test_chaos_history.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Entry = Mapping[str, Any]
TERMINAL = ("completed", "failed", "canceled")
OUTCOMES = frozenset({"RunCompleted", "RunFailed", "RunRetried", "RunRequeued", "RunCanceled"})
FINAL_EVENTS = frozenset({"RunCompleted", "RunFailed", "RunCanceled"})
RESCUE_REASONS = frozenset({"lease expired", "worker gone"})


@dataclass(frozen=True)
class RunFacts:
    id: str
    status: str
    attempt: int
    error: str | None = None


@dataclass(frozen=True)
class EventFacts:
    type: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Interval:
    start: float
    end: float
    scopes: tuple[str, ...]


@dataclass
class History:
    entries: Sequence[Entry]
    runs: Sequence[RunFacts]
    events: Mapping[str, Sequence[EventFacts]]
    submitted: Sequence[str]
    limits: Mapping[str, int]
    held_slots: Mapping[str, int] = field(default_factory=dict)
    innocents: Sequence[str] = ()


def _executions(entries: Iterable[Entry]) -> tuple[list[Entry], dict[tuple[Any, ...], float]]:
    starts, ends = [], {}
    for entry in entries:
        if entry["kind"] == "start":
            starts.append(entry)
        elif entry["kind"] == "end":
            ends[(entry["run"], entry["attempt"], entry.get("step"))] = entry["t"]
    return starts, ends


def intervals(entries: Sequence[Entry]) -> list[Interval]:
    """Each execution's interval. One without an end closes when its process was killed, or
    when it was frozen past its lease (`stop`: from then on the system counts it gone; its
    late writes are the completion rule's business), else at the last recorded instant."""
    starts, ends = _executions(entries)
    cuts: dict[int, list[float]] = defaultdict(list)
    for entry in entries:
        if entry["kind"] in ("kill", "stop"):
            cuts[entry["pid"]].append(entry["t"])
    horizon = max((entry["t"] for entry in entries), default=0.0)
    result = []
    for start in starts:
        end = ends.get((start["run"], start["attempt"], start.get("step")), horizon)
        cut = min((t for t in cuts[start["pid"]] if t >= start["t"]), default=end)
        result.append(Interval(start["t"], min(end, cut), tuple(start["scopes"])))
    return result


def peaks(spans: Iterable[Interval]) -> dict[str, int]:
    """Max number of executions open at one instant, per scope (sweep line; an end at t
    frees before a start at t)."""
    points: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for span in spans:
        for scope in span.scopes:
            points[scope] += [(span.start, 1), (span.end, -1)]
    result = {}
    for scope, marks in points.items():
        current = peak = 0
        for _, step in sorted(marks):
            current += step
            peak = max(peak, current)
        result[scope] = peak
    return result


def check_concurrency(entries: Sequence[Entry], limits: Mapping[str, int]) -> list[str]:
    return [
        f"concurrency: {scope} had {peak} executions at once, limit {limits[scope]}"
        for scope, peak in sorted(peaks(intervals(entries)).items())
        if scope in limits and peak > limits[scope]
    ]


def check_ends(runs: Sequence[RunFacts], submitted: Sequence[str]) -> list[str]:
    """Every run ends completed, failed with a reason, or canceled; none is lost."""
    known = {run.id: run for run in runs}
    problems = [f"lost: run {run_id} is not in the store" for run_id in submitted if run_id not in known]
    for run in runs:
        if run.status not in TERMINAL:
            problems.append(f"unfinished: run {run.id} is {run.status}")
        elif run.status == "failed" and not run.error:
            problems.append(f"no reason: run {run.id} failed without an error")
    return problems


def check_executions(entries: Sequence[Entry], runs: Sequence[RunFacts]) -> list[str]:
    """Executions per run <= attempts begun, and no attempt executed twice."""
    starts, _ = _executions(entries)
    per_attempt: dict[tuple[str, int], int] = defaultdict(int)
    for start in starts:
        if start.get("step") is None:
            per_attempt[(start["run"], start["attempt"])] += 1
    per_run: dict[str, int] = defaultdict(int)
    problems = []
    for (run_id, attempt), count in sorted(per_attempt.items()):
        per_run[run_id] += count
        if count > 1:
            problems.append(f"twice: attempt {attempt} of run {run_id} executed {count} times")
    for run in runs:
        if per_run.get(run.id, 0) > run.attempt:
            problems.append(f"executions: run {run.id} executed {per_run[run.id]} times in {run.attempt} attempts")
    return problems


def check_completions(events: Mapping[str, Sequence[EventFacts]], runs: Sequence[RunFacts]) -> list[str]:
    """At most one accepted outcome per attempt (a fenced-out late write adds none), and a run that
    ended has exactly one end event (a write that changed the row without its event is unfenced)."""
    problems = [
        f"outcomes: run {run.id} is {run.status} without an end event"
        for run in runs
        if run.status in TERMINAL and not any(event.type in FINAL_EVENTS for event in events.get(run.id, ()))
    ]
    for run_id, run_events in sorted(events.items()):
        per_attempt: dict[Any, int] = defaultdict(int)
        for event in run_events:
            if event.type in OUTCOMES and "attempt" in event.metadata:
                per_attempt[event.metadata["attempt"]] += 1
        problems += [
            f"outcomes: attempt {attempt} of run {run_id} has {count} accepted outcomes"
            for attempt, count in sorted(per_attempt.items())
            if count > 1
        ]
        finals = sum(event.type in FINAL_EVENTS for event in run_events)
        if finals > 1:
            problems.append(f"outcomes: run {run_id} ended {finals} times")
    return problems


def check_holders(held_slots: Mapping[str, int]) -> list[str]:
    return [f"holder left: {slots} slots of {scope} held after every run ended"
            for scope, slots in sorted(held_slots.items()) if slots]


def check_innocence(
    events: Mapping[str, Sequence[EventFacts]],
    runs: Sequence[RunFacts],
    innocents: Sequence[str],
    entries: Sequence[Entry] = (),
) -> list[str]:
    """A rescue charges an attempt only to an attempt that started (metadata `charged`; when it
    is missing the rescue charged), and the innocents of the poison scenario all complete.

    An attempt started when the store recorded it (`RunStarted`, or a `StepStarted` of a
    workflow) or when its task body logged a start: a worker may die after the body began and
    before its next turn records the start, and charging that attempt is fair.
    """
    executed: dict[str, set[Any]] = defaultdict(set)
    for entry in entries:
        if entry["kind"] == "start":
            executed[entry["run"]].add(entry["attempt"])
    problems = []
    for run_id, run_events in sorted(events.items()):
        started = set(executed.get(run_id, ()))
        for event in run_events:
            if event.type in ("RunStarted", "StepStarted"):
                started.add(event.metadata.get("attempt"))
            elif (
                event.type in ("RunRequeued", "RunFailed")
                and event.metadata.get("reason") in RESCUE_REASONS
                and event.metadata.get("charged", True)
                and event.metadata.get("attempt") not in started
            ):
                problems.append(
                    f"innocent charged: run {run_id} charged attempt {event.metadata.get('attempt')} it never started"
                )
    status = {run.id: run for run in runs}
    for run_id in innocents:
        run = status.get(run_id)
        if run is None or run.status != "completed":
            state = "missing" if run is None else f"{run.status} ({run.error})"
            problems.append(f"innocent failed: run {run_id} is {state}")
    return problems


def kills_and_hits(entries: Sequence[Entry]) -> tuple[int, int, int]:
    """SIGKILLs the storm sent; how many hit a process with an execution under way (a start by
    that pid without an end: the pid died at the kill, so the start came before it); how many
    of those hit a step holding pool slots."""
    starts, ends = _executions(entries)
    unended = [start for start in starts if (start["run"], start["attempt"], start.get("step")) not in ends]
    busy = {start["pid"] for start in unended}
    pooled = {start["pid"] for start in unended if start.get("step") is not None}
    kills = [entry["pid"] for entry in entries if entry["kind"] == "kill" and entry.get("storm", True)]
    return len(kills), sum(pid in busy for pid in kills), sum(pid in pooled for pid in kills)


def check(history: History) -> list[str]:
    """Every rule over one scenario's history."""
    return [
        *check_ends(history.runs, history.submitted),
        *check_executions(history.entries, history.runs),
        *check_completions(history.events, history.runs),
        *check_concurrency(history.entries, history.limits),
        *check_holders(history.held_slots),
        *check_innocence(history.events, history.runs, history.innocents, history.entries),
    ]
