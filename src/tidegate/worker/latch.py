"""Whether a turn that reports no outcome must claim (issue 16, lever 3 (c)).

A run's start goes to the store in a turn of its own when the run started
before the loop looked again. That turn also claimed for the free slots. But
when the worker's last claim came back short, with no `more` and no
next-due time, nothing more was claimable then. If nothing has happened since,
a new claim is sure to find nothing:

- no wake-up: every commit that could let a run in (a freed slot, a run queued,
  a raised limit) notifies after it commits;
- no poll;
- no outcome of its own: its own freed slot.

In ping-pong at limit 1 that was 0.52 claims per hand-off, each taking the
claim turn and locking window rows before the start's commit. Such a turn now
reports the start alone, in one batch; and a wake-up of the worker's own whose
outcome an earlier turn already reported makes no turn at all.

A claim held back by a rate says when a claim's worth of its held runs may start
(`next_allowed_in`, `domain.rate_charger.gathered_at`). Until then a turn that
reports only starts does not claim either: it would take the claim turn and
refuse the same runs again. The deadline is kept across such turns, for the
loop's sleep (`wait`), and the first turn at or after it, or woken from outside,
claims.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tidegate.domain.model import CycleResult, Outcome


class ClaimLatch:
    """The loop's memory of its last claim: latched when it proved nothing more claimable, released
    by anything that happens since; and the time a rate lets a claim's worth of runs start."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._monotonic = monotonic
        self._settled = False  # the last claim came back short, and nothing happened since
        self._allowed_at: float | None = None  # monotonic: when the runs a rate held back may start

    def unsettle(self) -> None:
        """Something happened (a wake-up, a poll, a failed turn): the next turn claims."""
        self._settled = False
        self._allowed_at = None

    def claim_limit(self, free: int, outcomes: Sequence[Outcome], look: bool) -> int:
        """How many runs this turn claims: none when it reports no outcome and nothing happened
        since a claim that came back short (or held back by a rate whose time has not come);
        else every free slot."""
        if not outcomes and not look and (self._settled or self._held_by_rate()):
            return 0
        return free

    def _held_by_rate(self) -> bool:
        """Whether the last claim's rate-held runs may not start yet."""
        return self._allowed_at is not None and self._monotonic() < self._allowed_at

    def claimed(self, limit: int, result: CycleResult, sent: float) -> None:
        """After a turn that claimed up to `limit` (sent at monotonic `sent`): remember whether
        that claim came back short, and when the runs a rate held back may start."""
        if limit > 0:
            allowed_in = result.next_allowed_in
            self._allowed_at = None if allowed_in is None else sent + max(0.0, allowed_in)
            self._settled = (
                len(result.claimed) < limit and not result.more and result.next_due_in is None and allowed_in is None
            )

    def recharge_refused(self, allowed_in: float | None, sent: float) -> None:
        """A turn sent at `sent` could not charge again every run whose lead ran out: the next turn
        asks again once the rates allow (`CycleResult.next_allowed_in`), however full the worker."""
        if allowed_in is not None:
            self._allowed_at = sent + max(0.0, allowed_in)

    def wait(self, longest: float) -> float:
        """Seconds to sleep, at most `longest`, before the runs a rate held back may start."""
        if self._allowed_at is None:
            return longest
        return min(longest, max(0.0, self._allowed_at - self._monotonic()))
