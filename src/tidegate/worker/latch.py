"""Whether a turn that reports only starts must also claim (issue 16, lever 3 (c)).

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
reports the start alone, in one batch.
"""

from __future__ import annotations

from collections.abc import Sequence

from tidegate.domain.model import CycleResult, Outcome
from tidegate.storage.port import Fence


class ClaimLatch:
    """The loop's memory of its last claim: latched when it proved nothing more claimable, released
    by anything that happens since."""

    def __init__(self) -> None:
        self._settled = False  # the last claim came back short, and nothing happened since

    def unsettle(self) -> None:
        """Something happened (a wake-up, a poll, a failed turn): the next turn claims."""
        self._settled = False

    def claim_limit(self, free: int, starts: Sequence[Fence], outcomes: Sequence[Outcome], look: bool) -> int:
        """How many runs this turn claims: none when it reports only starts and nothing happened
        since a claim that came back short; else every free slot."""
        if self._settled and starts and not outcomes and not look:
            return 0
        return free

    def claimed(self, limit: int, result: CycleResult) -> None:
        """After a turn that claimed up to `limit`: remember whether that claim came back short."""
        if limit > 0:
            self._settled = (
                len(result.claimed) < limit
                and not result.more
                and result.next_due_in is None
                and result.next_allowed_in is None
            )
