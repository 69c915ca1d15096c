"""Runs a claim takes ahead of a worker's free slots: which may wait for a slot, and how many.

A worker whose runs end fast claims, beside its free slots, runs that wait on
it for a slot and start while its next claim is in flight
(`CycleRequest.claim_ahead`). A run taken ahead holds a slot of every scope it
needs while it waits, so `admit` (domain/admission.py) takes one only where
that wait cannot cost anyone else a start:

- a rate charges it only with a lead it must start within
  (`domain.rate_charger.RateCharger.ahead_lead`): a rate's charge is its start,
  and a run charged now that starts later bunches starts past the limit in the
  windows they really fall in, unless its charge counts the lead (docs/rates.md,
  runs taken ahead under a rate);
- its queue has no per-worker cap (`max_workers`, `local_limit`) and no fair
  order, and it is no suspect: those rules judge the runs a worker really
  runs, and a fair lane's turn, or a suspect group's round, would be spent by
  a run that is not running;
- every scope it needs keeps, once it is in, at least as much room as the
  runs the decision took ahead in that scope (itself included): runs waiting
  ahead take at most half the room they found, so a limit with room never
  fills with runs that wait for a slot, and another worker with free slots
  still finds room beside them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tidegate.domain.scopes import Rules, ScopeNeed
from tidegate.domain.transitions import has_room


@dataclass
class WorkerRoom:
    """How many runs one claim decision takes: `capacity` for the worker's free slots and, past
    them, at most `ahead` runs that wait on the worker for a slot; the runs taken ahead per scope."""

    rules: Rules
    capacity: int
    ahead: int
    taken: dict[str, int] = field(default_factory=dict)  # scope -> runs this decision took ahead in it

    def fits_ahead(
        self,
        admitted: int,
        queue: str,
        suspect: bool,
        needs: Sequence[ScopeNeed],
        in_use: Mapping[str, int],
        pinned: bool,
    ) -> bool:
        """Whether a run of `queue` (a `suspect`; `pinned`: a rate charges it with no lead to start
        within), needing `needs` of the slots `in_use`, may be taken ahead after `admitted` runs,
        `capacity` of them or more."""
        if admitted >= self.capacity + self.ahead or suspect or pinned or not waits_ahead(self.rules, queue):
            return False
        return self.leaves_room(needs, in_use)

    def leaves_room(self, needs: Sequence[ScopeNeed], in_use: Mapping[str, int]) -> bool:
        """Whether every scope of `needs` keeps, once the run is in (used + 1), room for the runs
        taken ahead in it, this one too (taken + 1): half the room found, at most. A limit of
        None is unlimited, as everywhere (`has_room`)."""
        taken = self.taken
        for need in needs:  # noqa: SIM110 (a loop, not all(...): asked of every run taken ahead)
            if not has_room(in_use.get(need.key, 0) + 1, need.limit, taken.get(need.key, 0) + 1):
                return False
        return True

    def took(self, admitted: int, needs: Sequence[ScopeNeed]) -> None:
        """A run was admitted after `admitted` others: counted in its scopes if it went ahead."""
        if admitted >= self.capacity:
            for need in needs:
                self.taken[need.key] = self.taken.get(need.key, 0) + 1


def waits_ahead(rules: Rules, queue: str) -> bool:
    """Whether the runs of `queue` may wait ahead of a worker's free slots at all: no per-worker
    cap, fair order or adaptive rate of its own applies (a rate's room, a tag's rate and a
    suspect are asked of each run). The claim plan asks it too (`QueuePlan.ahead`)."""
    config = rules.queues.get(queue)
    return config is None or not (
        config.max_workers is not None
        or config.concurrency.local_limit is not None
        or config.ordering == "fair"
        or any(rate.adaptive is not None for rate in config.rate)
    )
