"""Dispatch deadlines and paused queues: the time a queue is paused does not count.

A run's dispatch deadline (`deadline_at`) bounds how long it may wait queued
for capacity before it fails "capacity: ..." (`transitions.deadline_error`).
While its queue is paused no worker may take it, and that wait is an
operator's choice, not a lack of capacity. So, the one rule, on both stores:

- the deadline sweep never fails a run of a paused queue (both dialects'
  `sweep_deadlines` skip paused queues; tests/contract/test_deadline_pause.py);
- resuming the queue moves each of its queued runs' deadline later by the time
  that run spent paused: from the pause, or from when it was queued if that was
  later (a run submitted or retried during the pause), until the resume.

A run therefore gets the whole wait its deadline allows, in unpaused time.
"""

from __future__ import annotations


def resumed_deadline(deadline_at: float, queued_at: float, paused_at: float, resumed_at: float) -> float:
    """The deadline (epoch seconds) of a run still queued when its queue resumes at `resumed_at`."""
    return deadline_at + max(0.0, resumed_at - max(paused_at, queued_at))
