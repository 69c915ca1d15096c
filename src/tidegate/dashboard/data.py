"""What the pages read, through the engine's operator services the API and CLI use (no query of its own).

Each helper returns plain values for a template; the numbers are the services'
own (queue positions are `engine.operators.queues.claim_order`'s, as `GET /api/v1/queue` shows them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tidegate.app import App
from tidegate.bootstrap import Store
from tidegate.domain import names
from tidegate.domain.blocking import Verdict, paused_text
from tidegate.domain.model import EventRecord, RunRecord, RunStatus
from tidegate.engine.operators import events, queues, runs
from tidegate.engine.operators.queues import QueueSummary

QUEUE_PAGE = 200  # queued runs one /queue page lists, from the head


@dataclass(frozen=True)
class QueuedRow:
    position: int  # in its queue's claim order
    run: RunRecord
    reason: str  # why it is not running, in words ("" when nothing blocks it)


def declared(app: App) -> Store:
    """The store with the served app's declarations written (as `declared_store` does for the API)."""
    app.enqueue([])
    return app.store


def queue_summaries(store: Store) -> list[QueueSummary]:
    return queues.summaries(store)


def check_queue(value: str | None) -> str | None:
    return names.check_name("queue", value) if value else None


def block_reason(found: Verdict) -> str:
    """Why a queued run waits, in words ("" when it is ready): the pause, then each full scope
    with its used/limit; the verdict is the one `queue why` gives (domain/blocking.py)."""
    parts = [paused_text(found.queue)] if found.paused else []
    parts.extend(
        check.text() if check.per is not None else f"{check.scope} full ({check.used}/{check.limit})"
        for check in found.blocking
    )
    return "; ".join(parts)


def run_reason(store: Store, run: RunRecord) -> str:
    """A run's page: why it waits now if it is queued ("" otherwise, or when it is ready)."""
    return block_reason(queues.live(store).verdict(run)) if run.status is RunStatus.QUEUED else ""


def queued(store: Store, queue: str | None) -> tuple[list[QueuedRow], int]:
    waiting, total = queues.claim_order(store, queue, QUEUE_PAGE)
    return [QueuedRow(each.position, each.run, block_reason(each.verdict)) for each in waiting], total


def status_counts(store: Store) -> dict[str, int]:
    return {status.value: count for status, count in runs.status_counts(store).items()}


def completions_per_minute(store: Store, minutes: int = 60) -> list[int]:
    """Runs ended in each of the last `minutes` minutes, oldest first (from `finished_count`)."""
    cumulative = [runs.finished_count(store, 60.0 * (index + 1)) for index in range(minutes)]
    per_minute = [cumulative[0]] + [cumulative[i] - cumulative[i - 1] for i in range(1, minutes)]
    return [max(0, count) for count in reversed(per_minute)]


def top_blocking(store: Store, limit: int = 5) -> list[tuple[str, int]]:
    """The scopes holding back the most queued runs now (`engine.operators.queues.blocked`)."""
    counts = queues.blocked(store).per_scope
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:limit]


@dataclass(frozen=True)
class Overflow:
    """The last CapacityOverflow a worker raised (runs the limits would admit waited, every worker full)."""

    event: EventRecord
    recent: bool  # raised in the last OVERFLOW_RECENT seconds: worth an alert, not just a note


OVERFLOW_RECENT = 300.0


def last_overflow(store: Store, now: datetime) -> Overflow | None:
    found = events.latest_events(store, "CapacityOverflow", 1)
    if not found:
        return None
    return Overflow(found[0], (now - found[0].at).total_seconds() < OVERFLOW_RECENT)


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


@dataclass(frozen=True)
class StepPod:
    """Where a Kubernetes step ran: its Job and pod, from the event that carried them."""

    job: str
    pod: str
    attempt: int | None
    event_id: int  # the event naming them (the Events tab row it links to)


def step_pods(events: list[EventRecord]) -> dict[str, StepPod]:
    """Each step's latest Job and pod, as its step events carry them (`StepOutputWritten` for a
    step that ran on Kubernetes); steps that ran in the worker have none."""
    found: dict[str, StepPod] = {}
    for event in events:
        job = event.metadata.get("job")
        if event.step_key is None or not isinstance(job, str) or not job:
            continue
        attempt = event.metadata.get("attempt")
        pod = event.metadata.get("pod")
        found[event.step_key] = StepPod(
            job, pod if isinstance(pod, str) else "", attempt if isinstance(attempt, int) else None, event.id
        )
    return found
