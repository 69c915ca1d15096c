"""PostgreSQL `peek_cycle`: a woken worker's cheap look before it claims.

A worker woken (a NOTIFY, its poll) with nothing to report used to claim at
once: on a limited queue that takes the claim fence and the queue's claim
turn, locks window rows and sums the scope usage, 3 round trips, even when
the one slot is taken, which at limit 1 is nearly always the case for the
process that did not just free it (docs/postgres-profile.md). Its futile turn
also made the worker that did free it queue behind it.

Here one statement (`peek_cycle`, no lock, no transaction of its own) reads
the rules version, the usage of the scopes that could close the worker's
queues (the claim plan's `closing_scopes`), whether a queue holds keyed runs or none at
all, and the worker's cancel requests. When the cached rules are the ones in force and
every open queue is closed, the answer is a cycle that claimed nothing; else
None, and the worker claims as before. No read at all when some open queue
has no scope that could close it (no limit, a partitioned one, tags only).
When the read found a queue open (a queued run, and room in every scope that
could close it), the claim that follows locks those scopes ahead, in its
first batch (`ScopeForecast.expect_runs`): look and claim take 3 round trips,
not 4, where the worker's last claim had found nothing (the usual case for a
worker that was waiting).

Why no wake-up is lost. The worker clears its wake-up flag before this read
starts (`worker/loop.py`). The read sees every commit made before it started
(READ COMMITTED: each statement's snapshot is taken when it starts). A commit
that frees a slot, raises a limit, resumes a queue or queues a run after that
sends its NOTIFY at commit, after the snapshot, so after the flag was
cleared: the listener sets the flag again and the worker's wait ends at once,
and its next turn looks again. So "closed" is only ever acted on while
nothing it did not see has been announced. Proven by
tests/contract/test_peek_cycle_contract.py (a free committed while the read
is held after it saw the slot taken).
"""

from __future__ import annotations

from collections.abc import Sequence

from tidegate.domain import claim_plan
from tidegate.domain.model import CycleResult
from tidegate.storage import port
from tidegate.storage.postgres.claim_scopes import ScopeForecast
from tidegate.storage.postgres.database import Aggregate, Database
from tidegate.storage.postgres.limits import Limits


class Look(Aggregate, port.LookVerbs):
    """The `peek_cycle` verb of the storage port."""

    def __init__(self, db: Database, limits: Limits, forecast: ScopeForecast) -> None:
        super().__init__(db)
        self._limits = limits
        self._forecast = forecast  # the claims': a look that found room has their claim lock ahead

    def peek_cycle(self, worker_id: str, queues: Sequence[str]) -> CycleResult | None:
        """What a cycle of this worker, reporting nothing, would answer, when the store can tell
        without claiming that it would claim nothing; None when it cannot (cycle as usual)."""
        cached = self._limits.cached
        if cached is None:
            return None
        version, rules = cached
        plan = claim_plan.plan(queues, rules)
        keys = plan.closing_scopes
        if keys is None:
            return None
        probed = plan.probed
        params = {"keys": keys, "queues": probed, "open": plan.open_names, "worker": worker_id}
        row = self._fetchone("peek_cycle", params)
        if row is None or row[0] != version:  # rules changed since cached: the claim reads them
            return None
        _, used, keyed, empty, cancels = row
        usage = dict(zip(keys, used, strict=True))
        if not plan.all_closed(usage, {}, set(probed) - set(keyed), set(empty)):
            self._forecast.expect_runs(queues)  # a run and room: the claim next locks its scopes ahead
            return None
        return CycleResult([], [], [(run_id, attempt) for run_id, attempt in cancels], None, False)
