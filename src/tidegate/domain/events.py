"""The events of a run's history: each type's name and metadata, written once.

Both stores append these rows (`tidegate_events`); the SQLite adapter writes
what these functions return, the PostgreSQL adapter too, except inside its
set-based statements (the cycle, the submit, the sweep, step slots), whose
`jsonb_build_object` calls tests/contract/test_events_pinned.py holds to these
functions on generated cases. Step slot events name a pool by its name and any
other scope (a fan-out window) by its key.

What a reader sees is the metadata these functions return, whatever the row's
shape: PostgreSQL's hot writers (the cycle's starts and outcomes, the claims'
RunDequeued) store `attempt` and `worker` in columns of their own to save bytes
(migration 0026), and every read goes through `tidegate_event_log`, which puts
them back as keys (tests/contract/test_event_columns.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from tidegate.domain.pools import pool_of
from tidegate.domain.recovery import LostAttempt, Rescue
from tidegate.domain.steps import RateWait, ScopeUse, StepStatus, StepUpdate
from tidegate.domain.transitions import CANCELED, FAILED, QUEUED

Metadata = dict[str, Any]


class Event(NamedTuple):
    type: str
    metadata: Metadata


# --- runs ----------------------------------------------------------------------------

CANCELED_WHILE_QUEUED = "canceled while queued"
WORKER_SHUTTING_DOWN = "worker shutting down"

ENDED = {"completed": "RunCompleted", "failed": "RunFailed", CANCELED: "RunCanceled", QUEUED: "RunRetried"}


def run_queued(queue: str) -> Event:
    return Event("RunQueued", {"queue": queue})


def run_dequeued(attempt: int, worker: str) -> Event:
    return Event("RunDequeued", {"attempt": attempt, "worker": worker})


def run_started(attempt: int, worker: str) -> Event:
    return Event("RunStarted", {"attempt": attempt, "worker": worker})


def run_blocked(blocked_by: Sequence[Mapping[str, Any]]) -> Event:
    """Its saturated scopes, each {"scope", "used", "limit"} (the run's block reason)."""
    return Event("RunBlocked", {"blocked_by": list(blocked_by)})


def attempt_ended(
    status: str,
    attempt: int,
    error: str | None,
    retry_delay: float | None,
    snoozed: bool = False,
    overloaded: bool = False,
) -> Event:
    """An outcome as applied: `status` is the one the run took (after a requested cancel). A snooze
    that took the queue is `RunSnoozed` with its delay and whether the task said the downstream was
    overloaded (a requested cancel still ends it canceled)."""
    metadata: Metadata = {"attempt": attempt}
    if error is not None:
        metadata["error"] = error
    if status == QUEUED and snoozed:
        return Event("RunSnoozed", {**metadata, "snooze_in": round(retry_delay or 0.0, 3), "overloaded": overloaded})
    if status == QUEUED:
        metadata["retry_in"] = round(retry_delay or 0.0, 3)
    return Event(ENDED[status], metadata)


def retried_by_operator(previous: str, attempt: int, max_attempts: int) -> Event:
    """A failed or canceled run given a new attempt by hand (`POST /runs/{id}/retry`).

    Its own name, not `RunRetried` (a retry policy re-queueing a failed attempt,
    which frees the attempt's slots): this run held nothing when it was retried.
    """
    return Event("RunRetriedManually", {"from": previous, "attempt": attempt, "max_attempts": max_attempts})


def canceled_while_queued() -> Event:
    return Event("RunCanceled", {"reason": CANCELED_WHILE_QUEUED})


def handed_back(status: str, attempt: int, worker: str, suspect: bool) -> Event:
    """A leaving worker's attempt, not charged: back to the queue, or canceled if that was asked."""
    metadata = {
        "attempt": attempt,
        "reason": WORKER_SHUTTING_DOWN,
        "worker": worker,
        "charged": False,
        "suspect": suspect,
    }
    return Event("RunRequeued" if status == QUEUED else "RunCanceled", metadata)


def rescued(verdict: Rescue, lost: LostAttempt) -> Event:
    """A lost attempt the sweep rescued (domain/recovery.py): re-queued, failed or canceled."""
    name = {QUEUED: "RunRequeued", FAILED: "RunFailed"}.get(verdict.status, "RunCanceled")
    return Event(name, verdict.metadata(lost))


def deadline_missed(attempt: int, error: str) -> Event:
    return Event("RunFailed", {"attempt": attempt, "error": error})


def slot_leak_repaired(scope: str, slots: int, attempt: int) -> Event:
    return Event("SlotLeakRepaired", {"scope": scope, "slots": slots, "attempt": attempt})


def capacity_overflow(backlog: int, workers: int, queues: Sequence[str]) -> Event:
    return Event("CapacityOverflow", {"backlog": backlog, "workers": workers, "queues": sorted(queues)})


def limit_changed(target: str, old: int | None, new: int | None, version: int, reset: bool) -> Event:
    return Event("LimitChanged", {"target": target, "old": old, "new": new, "version": version, "reset": reset})


def adaptive_limit_changed(target: str, old: int, new: int, reason: str) -> Event:
    """An adaptive queue's effective limit moved (domain/adaptive.py): down on overload, up on recovery."""
    return Event("LimitChanged", {"target": target, "old": old, "new": new, "source": "adaptive", "reason": reason})


def queue_paused(queue: str, paused: bool) -> Event:
    """A pause or resume is audited like a limit change: a paused queue admits nothing."""
    return Event("LimitChanged", {"target": f"queue:{queue}", "paused": paused})


def schedule_fired(schedule: str, tick: str, skipped_from: str | None) -> Event:
    """A schedule's tick submitted this run (`tick` in ISO 8601 UTC); `skipped_from`: the first
    earlier missed tick that was dropped by its missed-ticks policy, if any."""
    metadata: Metadata = {"schedule": schedule, "tick": tick}
    if skipped_from is not None:
        metadata["skipped_from"] = skipped_from
    return Event("ScheduleFired", metadata)


def schedule_tick_skipped(schedule: str, tick: str, key: str, skipped_from: str | None) -> Event:
    """A schedule's tick met a run holding its task's unique key (this run, the holder) and submitted
    nothing; `key`: the computed key; `skipped_from` as for `schedule_fired`."""
    metadata: Metadata = {"schedule": schedule, "tick": tick, "key": key}
    if skipped_from is not None:
        metadata["skipped_from"] = skipped_from
    return Event("ScheduleTickSkipped", metadata)


def pool_limit_changed(
    pool: str,
    old: int | None,
    new: int | None,
    lease_seconds: float | None,
    *,
    source: str | None = "override",
    reset: bool = False,
) -> Event:
    """A pool's limit in force moved; `source` says whose value it now is ('code', 'override', None)."""
    metadata = {"target": f"pool:{pool}", "old": old, "new": new, "lease_seconds": lease_seconds}
    return Event("LimitChanged", {**metadata, "source": source, "reset": reset})


# --- children and waits (issue 13) -----------------------------------------------------


def child_triggered(child_id: str, task: str, index: int, awaited: bool, linked: bool = False) -> Event:
    """On the parent: it triggered a child at position `index` of its calls (`linked`: a unique
    child whose key another run held: that run stands for it, none was stored)."""
    metadata: dict[str, Any] = {"child": child_id, "task": task, "index": index, "awaited": awaited}
    if linked:
        metadata["linked"] = True
    return Event("ChildTriggered", metadata)


def run_waiting(attempt: int, children: Sequence[str], released: Iterable[str], kept: Iterable[str]) -> Event:
    """The attempt ended waiting (not counted as an attempt): the children it waits for and
    the run-level scopes it released and kept meanwhile."""
    return Event(
        "RunWaiting",
        {"attempt": attempt, "children": list(children), "released": sorted(released), "kept": sorted(kept)},
    )


def run_resumed(waited: float) -> Event:
    """Every awaited child ended: back to the queue (in its place), after `waited` seconds."""
    return Event("RunResumed", {"waited": round(waited, 3)})


def canceled_with_parent(parent: str) -> Event:
    return Event("RunCanceled", {"reason": f"parent {parent} canceled"})


# --- steps ---------------------------------------------------------------------------

STEP_EVENTS = {
    StepStatus.RUNNING: "StepStarted",
    StepStatus.COMPLETED: "StepCompleted",
    StepStatus.FAILED: "StepFailed",
}
UNCONFIGURED_NOTE = "pool never configured: unlimited (tidegate pools set POOL LIMIT)"
SLOTS_RELEASED = "released"
LEASE_EXPIRED = "lease expired"


def handed_to(step_key: str) -> str:
    """Why a finished step's slots left it: its successor in the run took them over."""
    return f"handed to {step_key}"


def step_ended(status: StepStatus) -> str:
    """Why a step's slots were freed when it was recorded finished."""
    return f"step {status.value}"


def display(scope: str) -> str:
    """A pool's name, or the scope key for any other scope (a fan-out window)."""
    return pool_of(scope) or scope


def only_pools(freed: Mapping[str, int]) -> dict[str, int]:
    """The pool scopes among freed holders: only those get StepSlotReleased events."""
    return {scope: slots for scope, slots in freed.items() if pool_of(scope) is not None}


STEP_OUTPUT_WRITTEN = "StepOutputWritten"  # a remote step (a Kubernetes pod) wrote its output; the worker records it


def step_event(attempt: int, step: StepUpdate) -> Event | None:
    """A step's own event for the status it was recorded with (none for pending). A running step
    written with an output is a remote step handing its output to its worker (`StepOutputWritten`)."""
    if step.status is StepStatus.RUNNING and step.output is not None:
        return Event(STEP_OUTPUT_WRITTEN, step_metadata(attempt, step))
    name = STEP_EVENTS.get(step.status)
    return None if name is None else Event(name, step_metadata(attempt, step))


def step_metadata(attempt: int, step: StepUpdate) -> Metadata:
    metadata: Metadata = {"attempt": attempt}
    if step.map_key is not None:
        metadata["map_key"] = step.map_key
        metadata["item_index"] = step.item_index
    if step.error is not None:
        metadata["error"] = step.error
    if step.details:
        metadata.update(step.details)  # where it ran: a Kubernetes step's Job and pod
    return metadata


def slots_claimed(attempt: int, needs: Mapping[str, int], handed_from: str | None = None) -> Event:
    metadata: Metadata = {"attempt": attempt, "pools": {display(scope): n for scope, n in sorted(needs.items())}}
    if handed_from is not None:
        metadata["handed_from"] = handed_from
    return Event("StepSlotClaimed", metadata)


def slots_waiting(
    attempt: int, needs: Mapping[str, int], blocking: Sequence[ScopeUse], rate_wait: RateWait | None = None
) -> Event:
    """A step waits: for the pools in `blocking`, or (its pools having room) for a named rate."""
    blocked_by: list[dict[str, Any]] = [
        {"pool": use.name, "claimed": use.used, "limit": use.limit, "slots": needs[use.scope]} for use in blocking
    ]
    if rate_wait is not None:
        blocked_by.append(rate_wait.document())
    return Event("StepSlotWaiting", {"attempt": attempt, "blocked_by": blocked_by})


def slots_released(attempt: int, freed: Mapping[str, int], reason: str) -> Event:
    pools = {display(scope): n for scope, n in sorted(freed.items())}
    return Event("StepSlotReleased", {"attempt": attempt, "pools": pools, "reason": reason})


def slots_renewed(attempt: int, scopes: Sequence[str]) -> Event:
    return Event("StepSlotRenewed", {"attempt": attempt, "pools": sorted(display(scope) for scope in scopes)})


def pool_unconfigured(pool: str) -> Event:
    return Event("PoolUnconfigured", {"pool": pool, "limit": None, "note": UNCONFIGURED_NOTE})
