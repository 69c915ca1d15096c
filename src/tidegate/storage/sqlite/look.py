"""SQLite `peek_cycle`: a woken worker's cheap look before it claims.

The same rule as PostgreSQL's (storage/postgres/look.py, where the reason
and the wake-up argument are written out): when every open queue of the
worker is closed by a full scope that binds all its runs (`ClaimPlan.closures`),
answer a cycle that claimed nothing, read without the write lock. A claim
here takes `BEGIN IMMEDIATE`, the one write lock every writer waits for,
so a futile claim delays every other worker's completion.

No wake-up is lost: the worker clears its wake-up flag before these reads;
they see every commit made before they ran, and a commit after them that
frees a slot (or changes the rules, or queues a run) sends its datagram after
it commits, which sets the flag again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from tidegate.domain import claim_plan
from tidegate.domain.model import CycleResult
from tidegate.storage import port
from tidegate.storage.sqlite.database import Aggregate, Database
from tidegate.storage.sqlite.limits import Limits


class Look(Aggregate, port.LookVerbs):
    """The `peek_cycle` verb of the storage port."""

    def __init__(self, db: Database, limits: Limits) -> None:
        super().__init__(db)
        self._limits = limits

    def peek_cycle(self, worker_id: str, queues: Sequence[str]) -> CycleResult | None:
        """What a cycle of this worker, reporting nothing, would answer, when the store can tell
        without claiming that it would claim nothing; None when it cannot (cycle as usual)."""
        connection = self._connection()
        plan = claim_plan.plan(queues, self._limits.load_rules(connection))
        keys = plan.closing_scopes
        if keys is None:
            return None
        usage = dict(connection.execute(self._q("peek_cycle"), {"keys": json.dumps(keys)}).fetchall())
        probed = plan.probed
        keyed = {row[0] for row in connection.execute(self._q("peek_cycle_keyed"), {"queues": json.dumps(probed)})}
        opened = json.dumps(plan.open_names)
        empty = {row[0] for row in connection.execute(self._q("peek_cycle_empty"), {"queues": opened})}
        if not plan.all_closed(usage, {}, set(probed) - keyed, empty):
            return None
        cancels = [(row[0], row[1]) for row in connection.execute(self._q("cancel_requests"), {"worker": worker_id})]
        return CycleResult([], [], cancels, None, False)
