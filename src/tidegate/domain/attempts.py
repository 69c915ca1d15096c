"""A run's attempts as the code declared them, and the attempts that did not count, in words.

The store keeps `max_attempts` as the budget in force, so that whether a run
may run again stays one comparison (`transitions.attempts_left`): an attempt
that does not count (it ended waiting on children or snoozed, its worker handed
it back while shutting down, or a rescue did not charge it) grows the budget by one,
and so does an operator's retry. Shown as it is, that budget misleads ("attempt
2 of 2" for a task declared with `max_attempts=1`), so the run also counts each
growth by its cause (migration 0018) and every face words a run's attempts
with `describe` (a page, `runs show`) or `compact` (a table cell), never from
the budget alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class AttemptCount:
    """A run's attempt number, its budget in force and what grew that budget, by cause."""

    attempt: int  # attempts claimed so far (the fencing token); 0 before the first claim
    max_attempts: int  # the budget in force: the declared one plus every growth below
    child_waits: int = 0  # attempts that ended waiting on children
    worker_shutdowns: int = 0  # attempts handed back by a worker shutting down
    lost_workers: int = 0  # attempts lost with their worker and not charged to the run (domain/recovery.py)
    manual_retries: int = 0  # retries by an operator, each one attempt more
    snoozes: int = 0  # attempts that ended `raise Snooze(...)` (domain/snooze.py)

    @property
    def uncharged(self) -> int:
        """Attempts that ran (or began) but did not count against the budget."""
        return self.child_waits + self.worker_shutdowns + self.lost_workers + self.snoozes

    @property
    def declared(self) -> int:
        """The `max_attempts` the code (or the submit) gave the run."""
        return self.max_attempts - self.uncharged - self.manual_retries

    def uncharged_by_cause(self) -> dict[str, int]:
        """The uncharged attempts by cause, every cause present (the API's `uncharged_attempts`)."""
        return {
            "child_wait": self.child_waits,
            "worker_shutdown": self.worker_shutdowns,
            "lost_worker": self.lost_workers,
            "snooze": self.snoozes,
        }


_CAUSES = (  # (field, one, many)
    ("child_waits", "child wait", "child waits"),
    ("worker_shutdowns", "worker shutdown", "worker shutdowns"),
    ("lost_workers", "lost worker", "lost workers"),
    ("snoozes", "snooze", "snoozes"),
)


def describe(count: AttemptCount) -> str:
    """'2 of 3', or with attempts beyond the declared ones, each said in words:
    '2 of 1 allowed, +1 not charged (a child wait)', '4 of 3 allowed, +1 by a manual retry'."""
    if count.max_attempts == count.declared:
        return f"{count.attempt} of {count.declared}"
    parts = [f"{count.attempt} of {count.declared} allowed"]
    if count.uncharged:
        counted = [(getattr(count, name), one, many) for name, one, many in _CAUSES]
        if count.uncharged == 1:
            causes = [f"a {one}" for n, one, _ in counted if n]
        else:
            causes = [f"{n} {one if n == 1 else many}" for n, one, many in counted if n]
        parts.append(f"+{count.uncharged} not charged ({', '.join(causes)})")
    if count.manual_retries:
        retries = "a manual retry" if count.manual_retries == 1 else f"{count.manual_retries} manual retries"
        parts.append(f"+{count.manual_retries} by {retries}")
    return ", ".join(parts)


def compact(count: AttemptCount) -> str:
    """'2/3', or '2/1 +1' when attempts beyond the declared ones were added (a table cell; its
    words are `describe`'s)."""
    extra = count.max_attempts - count.declared
    return f"{count.attempt}/{count.declared}" + (f" +{extra}" if extra else "")


def following(count: AttemptCount) -> AttemptCount:
    """The count as the next claim will make it (one attempt later, the same budget)."""
    return replace(count, attempt=count.attempt + 1)
