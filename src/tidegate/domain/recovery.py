"""The rescue rule: which lost attempt is charged, and who runs alone next.

A run is rescued when its lease lapsed or its worker's heartbeat stopped.
A crash takes down every run of the process, so charging each of them an
attempt would fail innocent runs beside a poison one. The rule, written
here once for both adapters:

- a rescued attempt is *charged* (counts toward `max_attempts`, and may end
  the run failed) only if it **started** (its start was recorded for this
  attempt) and it **ran alone**: it was a suspect (suspects always run
  alone), or no other run of its worker was unsettled at the rescue;
- otherwise it is not charged (as a hand-back: `max_attempts` grows by one,
  the attempt number, the fencing token, never goes down) and can never end
  failed by this rescue;
- every rescued run that goes back to the queue becomes a *suspect*: its
  next attempt runs alone on its worker, its start recorded before its body
  runs, so that if it crashes again the crash is its own.

A run whose cancel was requested ends canceled whatever the rule says.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidegate.domain.integers import grown
from tidegate.domain.transitions import attempts_left, lost_attempt_error


@dataclass(frozen=True)
class LostAttempt:
    """A running attempt the store found lost, as read in the sweep's transaction."""

    run_id: str
    attempt: int
    max_attempts: int
    worker: str | None
    lapsed: bool  # its lease expired (else: its worker's heartbeat stopped)
    started: bool  # its start was recorded for this attempt
    suspect: bool  # it ran as a suspect: alone on its worker
    beside: int  # other runs of its worker unsettled at the rescue (running, or rescued from it)
    cancel_requested: bool = False
    # When the attempt was lost (ISO time, UTC): its worker's last heartbeat, or its lease's expiry if
    # that came first; the sweep that finds it may run much later, so this is what `runs show` reports.
    lost_at: str | None = None
    last_heartbeat: str | None = None  # its worker's last heartbeat (ISO, UTC), if the worker was registered


@dataclass(frozen=True)
class Rescue:
    """What the rescue writes: the run's new state and its event."""

    run_id: str
    attempt: int
    status: str  # "queued", "failed" or "canceled"
    charged: bool
    suspect: bool  # the flag the run carries from now on
    max_attempts: int
    error: str | None  # set when the rescue fails the run
    why: str

    def metadata(self, lost: LostAttempt) -> dict[str, object]:
        return {
            "attempt": self.attempt,
            "reason": "lease expired" if lost.lapsed else "worker gone",
            "worker": lost.worker,
            "charged": self.charged,
            "suspect": self.suspect,
            "why": self.why,
            "lost_at": lost.lost_at,
            "last_heartbeat": lost.last_heartbeat,
        }


def rescue(lost: LostAttempt) -> Rescue:
    """Charge the crash to the run that caused it (see the module docstring)."""
    charged = lost.started and (lost.suspect or lost.beside == 0)
    cause = "its lease expired" if lost.lapsed else "its worker is gone"
    if lost.cancel_requested:
        why = f"{cause}; its cancel was requested"
        return Rescue(lost.run_id, lost.attempt, "canceled", False, False, lost.max_attempts, None, why)
    if not charged:
        if not lost.started:
            why = f"{cause} before its start was recorded: not charged; it runs alone next"
        else:
            others = "other run" if lost.beside == 1 else "other runs"
            why = f"{cause} while it ran beside {lost.beside} {others}: not charged; it runs alone next"
        return Rescue(lost.run_id, lost.attempt, "queued", False, True, grown(lost.max_attempts), None, why)
    alone = "alone as a suspect" if lost.suspect else "alone"
    counted = f"attempt {lost.attempt} of {lost.max_attempts} charged"
    if not attempts_left(lost.attempt, lost.max_attempts):
        error = lost_attempt_error(lost.lapsed, lost.attempt, lost.max_attempts)
        why = f"{cause} while it ran {alone}: {counted}, none left"
        return Rescue(lost.run_id, lost.attempt, "failed", True, False, lost.max_attempts, error, why)
    why = f"{cause} while it ran {alone}: {counted}; it runs alone next"
    return Rescue(lost.run_id, lost.attempt, "queued", True, True, lost.max_attempts, None, why)
