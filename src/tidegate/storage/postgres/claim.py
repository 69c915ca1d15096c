"""PostgreSQL: one claim inside a worker's cycle, wherever a limit, a local cap or fair ordering applies.

Run-level scopes (limits) follow the claim's three parts (see
`storage.shared.claiming` and `domain.admission`): the claim reads candidate runs
(`FOR UPDATE SKIP LOCKED`, claim_reads.py), then locks the row of every scope
those candidates need in key order (`tidegate_scopes`, `FOR UPDATE`) and only
then sums their holders, so the usage it decides on cannot change before it
commits; `admit` decides; the same transaction writes the claims (each run's
row with the scopes it now holds: 0030_run_scopes.sql) and the block reasons.

Round trips: the first reads (rules version, the head of each queue, usage as
a hint of what is full, this worker's own counts) travel with the cycle's
first batch, sent as the cached rules call for them, and so do the locks of
the scopes a busy queue's claims are known to need, with their usage read
after them (claim_scopes.py); the writes ride with the commit: two round
trips. A scope needed that was not locked ahead adds one (its lock and
usage), as do reading past a head that is all waiting (runs of full tags,
other partitions' heads, unless sent ahead), a fair queue, or rules that
changed. A claim that may charge a rate reads the live rate states with the
first batch (the hint of its candidate read), and locks there too the states of
the one budget of each rated queue whose turn it holds (every run of the queue
charges them): two round trips when those are all it charges. The states of a
partitioned rate or a tag's rate depend on the runs read, and are locked after
them: three.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from tidegate.domain.admission import Admission, admit
from tidegate.domain.claim_plan import ClaimPlan, plan
from tidegate.domain.rates import RateStates
from tidegate.domain.scopes import TAG_RATE_PREFIX
from tidegate.storage.postgres.claim_reads import ClaimReads
from tidegate.storage.postgres.claim_scopes import ScopeForecast, ScopeLocks
from tidegate.storage.postgres.limits import Limits
from tidegate.storage.postgres.payloads import lane_load, local_usage, payload_json
from tidegate.storage.shared import claiming, wakes


class Claim:
    """One claim inside a cycle's transaction: read candidates, lock their scopes, admit, write."""

    def __init__(
        self,
        query: Callable[[str], str],
        limits: Limits,
        forecast: ScopeForecast,
        fill_order_member: bool,
        connection: psycopg.Connection[Any],
        worker_id: str,
        queues: list[str],
        limit: int,
        ahead: int,
        lease_seconds: float,
    ) -> None:
        self.query = query
        self.limits = limits
        self.fill_order_member = fill_order_member  # its full claim owes the next rank a wake-up
        self.connection = connection
        self.worker_id = worker_id
        self.queues = queues
        self.limit = limit  # the most it claims: the free slots' worth, and `ahead` runs past them
        self.ahead = ahead  # of `limit`, those only `admit` lets wait on the worker for a slot
        self.lease_seconds = lease_seconds
        self.forecast = forecast
        # The reads sent ahead are sized as the cached rules size the claim (`claiming.admit_sizes`)
        cached = limits.cached
        sized = limit if cached is None else sum(claiming.admit_sizes(plan(queues, cached[1]), limit, ahead))
        self.reads = ClaimReads(connection, query, worker_id, queues, sized, forecast.margin(queues, sized))
        self.claim_turns: set[str] = set()  # queues whose claim turn this transaction holds
        self.locks = ScopeLocks(connection, query, self.claim_turns)
        self.next_allowed_in: float | None = None  # seconds until a run a rate held back may start
        self.leads: dict[str, float] = {}  # the runs taken ahead under a rate, and their leads (`Admission.leads`)
        self.rates_ahead: psycopg.Cursor[Any] | None = None  # the rate hint, sent with the first batch
        # The rate windows locked in the first batch (key order), with the cursor of their states.
        self.rates_locked: tuple[list[tuple[str, int]], psycopg.Cursor[Any]] | None = None

    def run(self) -> tuple[psycopg.Cursor[Any] | None, psycopg.Cursor[Any] | None, bool]:
        """Queue the claim: the cursors of the claim and of the next-due probe (None when not
        sent; their rows arrive with the commit), and whether to claim again at once: the
        read came back full, not all of it could be taken, and no full limit that binds every
        run of the queues makes a second claim futile (`ClaimPlan.nothing_more`)."""
        if not self._read_rules():
            return None, self.connection.execute(self.query("due_now")), False
        reads = self.reads
        rules = reads.rules
        capacity, ahead = claiming.admit_sizes(reads.plan, self.limit, self.ahead)
        limit = capacity + ahead
        found = claiming.candidate_rows(
            reads.plan, limit, reads.hint, reads.reader(), reads.local, reads.margin, self._live_rates()
        )
        self.forecast.settle_partitions(self.queues, reads.partitioned)
        rows = found.rows
        if not rows:
            self.forecast.settle(self.queues, None, found=False)
            return None, self._next_due(), False
        locked = self._lock_scopes(rows)
        if locked is None:  # a scope needed out of the key order is held elsewhere: look again at once
            return None, self.connection.execute(self.query("due_now")), False
        usage, lanes = locked
        groups: dict[str, str] = {}
        suspects = claiming.suspect_ids(rows)
        if suspects:  # a worker runs one group of suspects at a time: read its own group, and theirs
            local_cursor = self.connection.execute(self.query("local_usage"), {"worker": self.worker_id})
            groups_cursor = self.connection.execute(self.query("suspect_groups"), {"ids": suspects})
            reads.local = local_usage(local_cursor)
            groups = dict(groups_cursor.fetchall())
        candidates = [
            claiming.to_candidate(row, rules, row["tags"] or {}, row["scheduled_at"].timestamp(), groups.get(row["id"]))
            for row in rows
        ]
        charged = self._rate_states(rows)
        if charged is None:  # a rate state would be locked out of the key order: look again at once
            return None, self.connection.execute(self.query("due_now")), False
        rate_states, now = charged
        decision = admit(candidates, usage, rules, reads.local, capacity, lanes or None, rate_states, now, ahead)
        if decision.next_allowed_at is not None:
            self.next_allowed_in = decision.next_allowed_at - now
        self.leads = decision.leads
        room = claiming.room_after(decision, usage, len(rows), limit)
        self.forecast.settle(self.queues, room, found=True)
        self._record_block_reasons(decision, rows)
        if not decision.admitted:
            return None, self._next_due(), False
        claim = self._send_claim(decision)
        short = len(decision.admitted) < limit  # every admitted run is locked, so all are claimed
        more = short and found.exhausted and not reads.plan.nothing_more(usage, reads.local, decision)
        return claim, self._next_due() if short else None, more

    def _read_rules(self) -> bool:
        """Read the rules and plan the claim on them (`reads.plan`), take the claim turns it asks
        for and send the reads it calls for (in the first batch when the cached rules still
        hold). False, having read nothing more, when a turn would be taken out of order."""
        connection, limits = self.connection, self.limits
        cached = limits.cached
        rules_cursor = connection.execute(self.query("load_rules"), {"known": None if cached is None else cached[0]})
        ahead, sent = None, None
        if cached is not None:  # plan on the cached rules, and send what it asks for ahead
            ahead = plan(self.queues, cached[1])
            self._take_claim_turns(ahead)
            sent = self._send_reads(ahead)
            if _rated(ahead):  # the rate hint rides in the first batch too (every live state: rules aside)
                self.rates_ahead = connection.execute(
                    self.query("live_rate_states"), {"slack": claiming.STATE_SLACK_NS}
                )
                locked = claiming.ahead_rate_keys(ahead, self.claim_turns)
                if locked:  # after the turns: a queue's budget is charged only under its turn
                    self.rates_locked = locked, self._lock_rate_states(locked)
        rules = limits.rules_from_row(rules_cursor.fetchone())  # ends the first batch
        if rules is None:  # the cache moved meanwhile (another thread): read the rules whole
            rules = limits.parse_rules(connection.execute(self.query("load_rules"), {"known": None}).fetchone())
        if ahead is None or sent is None or rules is not ahead.rules:
            ahead = plan(self.queues, rules)
            if not self._take_claim_turns(ahead):
                # A queue these rules serialize came after one already held: taking its turn
                # now could deadlock with a claimer that waits the other way. Look again at once.
                return False
            sent = self._send_reads(ahead)
        self.reads.plan = ahead
        self.reads.receive(sent)
        self.locks.held(sent.get("ahead", []), self.reads.hint)
        return True

    def _send_reads(self, claim: ClaimPlan) -> dict[str, Any]:
        """The first reads, with the locks of the scopes and the partition reads the forecast names."""
        return self.reads.send(
            claim,
            lambda: self.locks.lock_ahead(self.forecast.keys(self.queues, claim, self.claim_turns)),
            self.forecast.partitioned(self.queues),
        )

    def _lock_scopes(
        self, rows: Sequence[claiming.Row]
    ) -> tuple[dict[str, int], dict[tuple[str, str], int] | None] | None:
        """The usage of the scopes the candidates need, each locked before it was read, and the
        running load of fair lanes: a batch of their own for what was not read ahead. None when
        a scope could not be locked without breaking the key order (claim_scopes.py)."""
        connection, claim = self.connection, self.reads.plan
        keys = claim.needed_keys(claiming.shapes(rows))
        lanes_cursor = None
        fair = claim.fair_lanes
        if fair and self.reads.lanes is None:
            lanes_cursor = connection.execute(self.query("lane_load"), {"queues": fair})
        if keys:
            self.forecast.learn(self.queues, keys)
            if not self.locks.lock(keys):
                return None
        lanes = self.reads.lanes if lanes_cursor is None else lane_load(lanes_cursor)
        return {key: self.locks.usage[key] for key in keys}, lanes

    def _live_rates(self) -> RateStates | None:
        """The rate states that may refuse a start now (unlocked: a hint for the candidate read, which
        steps over their partitions' runs), when a run read may be charged a rate (None: none may)."""
        if not _rated(self.reads.plan):
            return None
        cursor = self.rates_ahead
        if cursor is None:
            cursor = self.connection.execute(self.query("live_rate_states"), {"slack": claiming.STATE_SLACK_NS})
        rows = cursor.fetchall()
        return RateStates({(scope, window): tat for _, scope, window, tat in rows if scope is not None}, rows[0][0])

    def _rate_states(self, rows: Sequence[claiming.Row]) -> tuple[dict[tuple[str, int], int], float] | None:
        """The stored states of the rate windows the candidates would be charged, locked (key order),
        and the database's time to charge them at (read after every lock was granted); no read when
        every one was locked in the first batch, or none may be charged. None, locking nothing more,
        when the first batch locked windows and a run needs another (the rules moved since): it could
        sort below those held, against the key order (`claiming.ahead_rate_keys`); the next claim
        plans on the rules in force.

        A queue's rate is charged only under its claim turn (`ClaimPlan` gives a rated queue
        one). A tag's rate is charged by claimers of any queue, so its rows are made to exist
        first (`rate_states_seed`): the lock then serializes its charges, where a row missing
        from the lock would let two claimers each charge it from nothing."""
        keys = claiming.rate_keys(rows, self.reads.rules)
        if not keys:
            return {}, 0.0
        states: dict[tuple[str, int], int] = {}
        now = 0.0
        held: list[tuple[str, int]] = []
        if self.rates_locked is not None:
            held, cursor = self.rates_locked
            states, now = _states(cursor.fetchall())
        missing = [key for key in keys if key not in set(held)]
        if missing and held:  # the rules moved since the first batch named every window
            return None
        if missing:
            shared = [key for key in missing if key[0].startswith(TAG_RATE_PREFIX)]
            if shared:  # claimers of other queues charge a tag's rate too: its rows must exist to be locked
                self.connection.execute(
                    self.query("rate_states_seed"),
                    {"scopes": [scope for scope, _ in shared], "windows": [window for _, window in shared]},
                )
            found, now = _states(self._lock_rate_states(missing).fetchall())
            states.update(found)
        return {key: states[key] for key in keys if key in states}, now

    def _lock_rate_states(self, keys: list[tuple[str, int]]) -> psycopg.Cursor[Any]:
        return self.connection.execute(
            self.query("rate_states"),
            {"scopes": [scope for scope, _ in keys], "windows": [window for _, window in keys]},
        )

    def _record_block_reasons(self, decision: Admission, rows: Sequence[claiming.Row]) -> None:
        """Queue the write of every block reason that changed (it rides with the commit)."""
        changed = claiming.changed_block_reasons(decision, {row["id"]: row["block_reason"] for row in rows})
        if changed:
            reasons = [
                {"n": index, "id": run_id, "reason": json.loads(reason)}
                for index, (run_id, reason) in enumerate(changed.items())
            ]
            self.connection.execute(self.query("set_block_reasons"), {"reasons": payload_json(reasons)})

    def _send_claim(self, decision: Admission) -> psycopg.Cursor[Any]:
        """Queue the claim of the admitted runs (and the wake-up a full claim owes the fill order)."""
        connection = self.connection
        if len(decision.admitted) == self.limit and self.fill_order_member:
            # A full claim may leave work for the next worker in the fill order, which only looks when told.
            wakes.everyone()
        held = {candidate.id: [need.key for need in needs] for candidate, needs in decision.admitted if needs}
        if decision.rate_states:
            keys = sorted(decision.rate_states)
            connection.execute(
                self.query("rate_states_write"),
                {
                    "scopes": [scope for scope, _ in keys],
                    "windows": [window for _, window in keys],
                    "tats": [decision.rate_states[key] for key in keys],
                },
            )
        return connection.execute(
            self.query("claim_runs"),
            {
                "ids": [candidate.id for candidate, _ in decision.admitted],
                "held": json.dumps(held, separators=(",", ":")),
                "worker": self.worker_id,
                "lease": self.lease_seconds,
                "charges": claiming.charges_json(decision),
            },
        )

    def _take_claim_turns(self, claim: ClaimPlan) -> bool:
        """Wait for this claimer's turn at every queue the plan serializes (`ClaimPlan.claim_turns`, in
        name order).

        A queue some limit applies to, or a fair queue, is claimed by one
        claimer at a time, as on SQLite: concurrent claimers would each lock
        (SKIP LOCKED) part of the head of the queue, and one whose share is all
        waiting (its local limit, a full partition) would find nothing while the
        runs it could start sit locked by another; and fair turns would be
        judged on running counts that change underneath. Queues no limit
        applies to keep claiming in parallel. Returns False, taking nothing, if
        a turn would be taken out of order (the rules changed mid-claim): after
        a queue's turn already held, or after scope rows locked ahead
        (`ClaimPlan.take_claim_turns`).
        """
        needed = claim.take_claim_turns(self.claim_turns, bool(self.locks.locked))
        if needed is None:
            return False
        for queue in needed:
            self.connection.execute(self.query("claim_turn"), {"queue": queue})
        self.claim_turns.update(needed)
        return True

    def _next_due(self) -> psycopg.Cursor[Any]:
        return self.connection.execute(self.query("next_due"), {"queues": self.queues})


def _rated(claim: ClaimPlan) -> bool:
    """Whether a run the claim may read could be charged a rate (its queue's or a tag's)."""
    return any(claim.rules.has_rates(queue.name) for queue in claim.open)


def _states(rows: Sequence[Any]) -> tuple[dict[tuple[str, int], int], float]:
    """The states `rate_states` locked, and the database's time it read them at."""
    return {(scope, window): tat for _, scope, window, tat in rows if scope is not None}, rows[0][0]
