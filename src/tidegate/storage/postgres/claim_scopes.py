"""PostgreSQL claim scopes: which scope rows a claim locks, when, and in what order.

A claim where limits apply locks the `tidegate_scopes` row of every scope
its candidates need and only then reads their usage: under READ COMMITTED a
statement's snapshot is taken when it starts, so the read is a statement of
its own, sent after the lock. The usage `admit` decides on then cannot
change before the claim commits.

Sent ahead. Where the keys are known before the candidates are read (the
global cap and an unpartitioned queue's limit, from the plan on the cached rules;
partitions and tags, from the keys the last claims of the same queues needed:
`ScopeForecast`), they are locked in the claim's first batch, after its
window, and the usage read there (`scope_usage_held`) is exact for them: a
claim is then two round trips, not three. A key needed that was not locked
ahead is locked in a batch of its own, as before: the forecast saves round
trips, it never decides. A key forecast but not needed is held to the commit
for nothing, at worst making a claimer of another queue that needs it wait.
Nothing is locked ahead after a claim that found no run: a row lock is a
write, and a claim of an empty queue writes nothing else, so it commits
without waiting for a WAL flush (an idle worker's poll: 0.5 ms against 0.9
ms with the locks, blocked_backlog's empty case).

The order is the plan's (`domain.claim_plan.lock_steps`, after the claim turns of
`ClaimPlan.take_claim_turns`; postgres/children.py places it among the other locks).
A shared key (`global`, `tag:...`) below one already held is tried, never
waited for (`try_lock_scopes`, SKIP LOCKED); when it is held elsewhere or not
created yet, the claim takes nothing and looks again at once. By then the forecast has it, and the next
claim locks it ahead, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import psycopg

from tidegate.domain.claim_plan import ClaimPlan, lock_steps, own_queue
from tidegate.storage.postgres.claim_reads import Partitioned

MAX_FORECAST = 64  # keys locked ahead at most, per set of queues


class ScopeForecast:
    """What the last claims of each set of queues met: the scope keys they needed (what the next
    one locks ahead) and the room they left (whether the next one reads a margin).

    One per store, shared by its claims, read only while its queues are busy
    (their last claim found runs); an entry that went stale costs a lock
    held for nothing, a round trip or a short claim, never a wrong decision."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, ...], dict[str, None]] = {}  # keys needed, the latest last
        self._room: dict[tuple[str, ...], int | None] = {}  # claiming.room_after of the last claim
        self._partitioned: dict[tuple[str, ...], dict[str, Partitioned]] = {}
        self._busy: dict[tuple[str, ...], bool] = {}  # the last claim found runs to decide on

    def margin(self, queues: Sequence[str], claim_limit: int) -> bool:
        """Whether a claim of `queues` reads its window's margin (QueuePlan.window): unless
        the last one held nothing back and left room for this one in every scope it used."""
        room = self._room.get(tuple(queues))
        return room is None or room < claim_limit

    def settle(self, queues: Sequence[str], room: int | None, found: bool) -> None:
        """What the last claim of `queues` met: the room it left (claiming.room_after), and whether
        it found any run to decide on (only then does the next lock scopes ahead)."""
        self._room[tuple(queues)] = room
        self._busy[tuple(queues)] = found

    def expect_runs(self, queues: Sequence[str]) -> None:
        """A look (`peek_cycle`, look.py) found a queued run of `queues` and room in the scopes
        that could close them: the claim that follows locks its scopes ahead, as after a claim
        that found runs (a woken worker's claim in 2 round trips, not 3)."""
        self._busy[tuple(queues)] = True

    def partitioned(self, queues: Sequence[str]) -> dict[str, Partitioned]:
        """The queues whose partitions the last claim of `queues` read (past a head all waiting),
        as it asked for them: the next claim sends the same read in its first batch."""
        return self._partitioned.get(tuple(queues), {})

    def settle_partitions(self, queues: Sequence[str], partitioned: dict[str, Partitioned]) -> None:
        self._partitioned[tuple(queues)] = partitioned

    def keys(self, queues: Sequence[str], claim: ClaimPlan, claim_turns: Collection[str]) -> list[str]:
        """The keys a claim of `queues` holding the claim turns `claim_turns` locks ahead, in key order:
        those its plan names before any run is read (`ClaimPlan.ahead_keys`), and those needed
        lately. A queue's own key
        only when its turn is held (the exception to the key order rests on it). None after a
        claim that found no run, unless a look found room since (`expect_runs`): a lock is a
        write, and a claim of an empty queue writes nothing else, so it commits without waiting
        for a WAL flush (an idle worker's poll)."""
        if not self._busy.get(tuple(queues), False):
            return []
        keys = set(self._seen.get(tuple(queues), ())) | set(claim.ahead_keys(claim_turns))
        return sorted(key for key in keys if own_queue(key) is None or own_queue(key) in claim_turns)

    def learn(self, queues: Sequence[str], needed: Sequence[str]) -> None:
        """Remember the keys a claim of `queues` needed, with those earlier claims needed: a
        window moving along a queue meets its partitions and tag values over many claims, and
        a key missed costs a round trip where one held for nothing costs a row lock. At most
        MAX_FORECAST, those needed last."""
        seen = dict(self._seen.get(tuple(queues), {}))  # replaced, not changed: claims on other threads read it
        for key in needed:
            seen.pop(key, None)
            seen[key] = None  # a dict keeps insertion order: the latest last
        self._seen[tuple(queues)] = dict.fromkeys(list(seen)[-MAX_FORECAST:])


class ScopeLocks:
    """The scope rows one claim's transaction holds, and their usage as read under the lock."""

    def __init__(self, connection: psycopg.Connection[Any], query: Callable[[str], str], claim_turns: set[str]) -> None:
        self.connection = connection
        self.query = query
        self.claim_turns = claim_turns  # the claim turns the claim holds, as it takes them
        self.locked: set[str] = set()  # sent: each is granted before any later statement runs
        self.usage: dict[str, int] = {}  # slots in use of each locked key, read after its lock

    def lock_ahead(self, keys: Sequence[str]) -> list[str]:
        """Queue the locks of the forecast keys this claim may wait for now, and return every key
        it holds by then: the usage read sent next (scope_usage_held) is exact for all of them
        (`held`), those locked by an earlier send of the same claim (its rules moved) included."""
        wait, _ = self._split(keys)
        self._lock(wait)
        return sorted(self.locked)

    def held(self, keys: Sequence[str], usage: dict[str, int]) -> None:
        """The usage of keys locked ahead, from the read sent after their locks."""
        for key in keys:
            self.usage[key] = usage.get(key, 0)

    def lock(self, keys: Sequence[str]) -> bool:
        """Lock the keys not held yet and read their usage (one round trip, when any). False when
        one could only be tried and is held elsewhere or not created yet: take nothing then."""
        wait, tried = self._split(keys)
        if not (wait or tried):
            return True
        self._lock(wait)
        taken = self.connection.execute(self.query("try_lock_scopes"), {"keys": tried}) if tried else None
        rows = self.connection.execute(self.query("scope_usage_of"), {"keys": wait + tried}).fetchall()
        if taken is not None and len(taken.fetchall()) < len(tried):
            return False
        self.locked.update(tried)
        self.held(wait + tried, dict(rows))
        return True

    def _split(self, keys: Sequence[str]) -> tuple[list[str], list[str]]:
        """The keys not held yet, in key order: those this claim may wait for, and those it may only
        try (`claim_plan.lock_steps`: a shared key below a shared key it holds)."""
        return lock_steps(keys, self.locked, self.claim_turns)

    def _lock(self, keys: list[str]) -> None:
        if keys:
            self.connection.execute(self.query("upsert_scopes"), {"keys": keys})
            self.connection.execute(self.query("lock_scopes"), {"keys": keys})
            self.locked.update(keys)
