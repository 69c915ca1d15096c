"""PostgreSQL claims: the worker's cycle (report, then claim) and the claim inside it.

Run-level scopes (limits) follow the claim's three parts (see
`storage.claiming` and `domain.admission`): the cycle reads candidate runs
(`FOR UPDATE SKIP LOCKED`), then locks the row of every scope those
candidates need in key order (`tidegate_scopes`, `FOR UPDATE`) and only then
sums the holder rows, so the usage it decides on cannot change before it
commits; `admit` decides; the same transaction writes the claims, their
holder rows and the block reasons. That costs one more round trip, taken
only when some candidate needs a scope. Where no limit applies, the claim is
one statement and the whole cycle one round trip (free_claims.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tidegate.domain.admission import Admission, LocalUsage, admit
from tidegate.domain.model import CycleResult, Outcome
from tidegate.domain.scopes import Rules
from tidegate.storage import claiming, closure
from tidegate.storage.port import Fence
from tidegate.storage.postgres import free_claims
from tidegate.storage.postgres.children import Children
from tidegate.storage.postgres.database import Aggregate, Database
from tidegate.storage.postgres.limits import Limits
from tidegate.storage.postgres.payloads import (
    claim_order,
    claimed_run,
    excluded_json,
    lane_load,
    local_usage,
    outcome_payload,
    payload_json,
    start_arrays,
    uses_tags,
)
from tidegate.storage.postgres.pipeline import implicit_transaction, transaction
from tidegate.storage.postgres.workers import Workers


class Claims(Aggregate):
    """The cycle verb of the storage port."""

    def __init__(self, db: Database, limits: Limits, workers: Workers, children: Children) -> None:
        super().__init__(db)
        self._limits = limits
        self._workers = workers
        self._children = children

    def cycle(
        self,
        worker_id: str,
        queues: Sequence[str],
        starts: Sequence[Fence],
        outcomes: Sequence[Outcome],
        claim_limit: int,
        lease_seconds: float,
    ) -> CycleResult:
        """Report, then claim, in one transaction of pipelined batches.

        The first batch records starts and outcomes (releasing the scopes of
        ended attempts), checks the rules version and reads and locks the
        candidates; when some candidate needs a scope, a second batch locks
        the scopes and reads their usage; the last writes what `admit` decided
        (and, when the claim fell short, asks when the next run falls due),
        reads cancel requests and commits. Where no limit applies the claim is
        one statement and the cycle one batch (free_claims.py); when that
        statement refuses, a second transaction claims the general way. READ
        COMMITTED whatever the server's default: the usage read must see every
        claim committed before the scope lock was granted. A worker in the fill
        order above rank 0 first reads the registry (one more round trip).
        """
        if not (starts or outcomes or claim_limit > 0):  # a full worker woken looks for cancels: one read
            cancels = [(row[0], row[1]) for row in self._fetchall("cancel_requests", {"worker": worker_id})]
            return CycleResult([], [], cancels, None, False)
        result, refused = self._cycle(worker_id, queues, starts, outcomes, claim_limit, lease_seconds, free=True)
        if not refused:
            return result
        again, _ = self._cycle(worker_id, queues, [], [], claim_limit, lease_seconds, free=False)
        return CycleResult(again.claimed, result.fenced_out, again.cancel_requested, again.next_due_in, again.more)

    def _cycle(
        self,
        worker_id: str,
        queues: Sequence[str],
        starts: Sequence[Fence],
        outcomes: Sequence[Outcome],
        claim_limit: int,
        lease_seconds: float,
        free: bool,
    ) -> tuple[CycleResult, bool]:
        """One cycle's transaction; and whether its one-statement claim refused (claim again)."""
        queue_list = list(queues)
        reported, outcome_json = outcome_payload(outcomes)
        chosen = None  # a one-statement claim: (rules version, queues)
        if free and claim_limit > 0 and queue_list and not self._workers.fill_order.member(worker_id):
            chosen = free_claims.free_queues(self._limits.cached, queue_list)  # a member's full claim notifies
        with self._connection() as connection:
            # A cycle that reads nothing before it commits is one batch: an implicit transaction.
            one_batch = chosen is not None or claim_limit <= 0 or not queue_list
            begin = b"BEGIN ISOLATION LEVEL READ COMMITTED"
            with implicit_transaction(connection) if one_batch else transaction(connection, begin):
                applied = None
                if starts or outcomes:
                    applied = connection.execute(
                        self._q("cycle_reports"),
                        {**start_arrays(starts), "outcomes": outcome_json, "worker": worker_id},
                    )
                if outcomes:
                    # A waiting parent whose last awaited child just ended goes back to the queue.
                    self._children.resume_parents(connection, [outcome.run_id for outcome in outcomes])
                    connection.execute(self._q("notify"))  # finished runs may be waited on, and free capacity
                claim, due, more, one_statement = None, None, False, None
                if claim_limit > 0 and self._workers.fill_order.reads_registry(worker_id):
                    queue_list = self._workers.fill_order_queues(connection, worker_id, queue_list)
                if claim_limit > 0 and queue_list:
                    connection.execute(self._q("claim_fence"))
                    if chosen is not None:
                        version, open_queues = chosen
                        query = self._q("claim_runs_free")
                        one_statement = free_claims.send(
                            connection, query, version, open_queues, worker_id, claim_limit, lease_seconds
                        )
                    else:
                        claim, due, more = _Claim(
                            self, connection, worker_id, queue_list, claim_limit, lease_seconds
                        ).run()
                # After the claim: with a one-statement claim the stall a race test puts here
                # (tests/contract/test_free_claims.py) holds the claim fence and the claimed rows.
                cancels = connection.execute(self._q("cancel_requests"), {"worker": worker_id})
            applied_fences = set() if applied is None else {(row[0], row[1]) for row in applied.fetchall()}
            cancel_requested = [(row[0], row[1]) for row in cancels.fetchall()]
            refused = False
            if one_statement is not None:
                found = free_claims.received(one_statement)
                claimed, next_due_in, refused = found.claimed, found.next_due_in, found.refused
            else:
                claimed = [] if claim is None else [claimed_run(row) for row in claim.fetchall()]
                # fetchone() is typed Optional; this statement always returns one row
                next_due_in = None if due is None else due.fetchone()[0]  # type: ignore[index]
        fenced_out = [fence for fence in reported if fence not in applied_fences]
        return CycleResult(claimed, fenced_out, cancel_requested, next_due_in, more), refused


class _Claim:
    """One claim inside a cycle's transaction: read candidates, lock their scopes, admit, write.

    Round trips: the first reads (rules version, the head of each queue, usage
    as a hint of what is full, this worker's own counts) travel with the
    cycle's first batch, sent as the cached rules call for them; the scope
    locks and the usage they guard make a second batch, only when some
    candidate needs a scope; the writes ride with the commit. Reading past a
    head that is all waiting (runs of full tags, other partitions' heads), a
    fair queue, or rules that changed, each add one.

    Every read `claiming` asks for that was not sent ahead is read when asked:
    what is sent ahead only saves round trips, it never decides anything.
    """

    def __init__(
        self,
        store: Claims,
        connection: psycopg.Connection[Any],
        worker_id: str,
        queues: list[str],
        limit: int,
        lease_seconds: float,
    ) -> None:
        self.store = store
        self.connection = connection
        self.worker_id = worker_id
        self.queues = queues
        self.limit = limit
        self.lease_seconds = lease_seconds
        self.rules = Rules()
        self.hint: dict[str, int] = {}  # slots in use before the scope lock: what to read, never the decision
        self.local = LocalUsage()
        self.windows: dict[tuple[str, int, tuple[tuple[str, str], ...]], list[dict[str, Any]]] = {}
        self.heads: dict[tuple[str, str, tuple[tuple[str, str], ...]], tuple[int, list[dict[str, Any]]]] = {}
        self.lanes: dict[tuple[str, str], int] | None = None
        self.turns: set[str] = set()  # queues whose claim turn this transaction holds

    def run(self) -> tuple[psycopg.Cursor[Any] | None, psycopg.Cursor[Any] | None, bool]:
        """Queue the claim: the cursors of the claim and of the next-due probe (None when not
        sent; their rows arrive with the commit), and whether to claim again at once: the
        read came back full, not all of it could be taken, and no full limit that binds every
        run of the queues (`storage.closure`) makes a second claim futile."""
        if not self._read_rules():
            return None, self.connection.execute(self.store._q("due_now")), False
        rules = self.rules
        reader = claiming.CandidateReader(self._window, self._partitions, self._partition_head)
        found = claiming.candidate_rows(self.queues, self.limit, rules, self.hint, reader, self.local)
        rows = found.rows
        if not rows:
            return None, self._next_due(), False
        usage, lanes = self._lock_scopes(rows)
        if any(row["suspect"] for row in rows):  # a suspect is taken only by an idle worker: count what it runs
            self.local = local_usage(self.connection.execute(self.store._q("local_usage"), {"worker": self.worker_id}))
        candidates = [
            claiming.to_candidate(row, rules, row["tags"] or {}, row["scheduled_at"].timestamp()) for row in rows
        ]
        decision = admit(candidates, usage, rules, self.local, self.limit, lanes or None)
        self._record_block_reasons(decision, rows)
        if not decision.admitted:
            return None, self._next_due(), False
        claim = self._send_claim(decision)
        short = len(decision.admitted) < self.limit  # every admitted run is locked, so all are claimed
        more = short and found.exhausted and not closure.nothing_more(self.queues, rules, usage, self.local, decision)
        return claim, self._next_due() if short else None, more

    def _read_rules(self) -> bool:
        """Read the rules into `self.rules`, take the claim turns they ask for and the reads sent
        ahead for them (in the first batch when the cached rules still hold). False, having
        read nothing more, when a turn would be taken out of order."""
        store, connection = self.store, self.connection
        cached = store._limits.cached
        rules_cursor = connection.execute(store._q("load_rules"), {"known": None if cached is None else cached[0]})
        sent = None
        if cached is not None:
            self._take_turns(cached[1])
            sent = self._send_reads(cached[1])
        rules = store._limits.rules_from_row(rules_cursor.fetchone())  # ends the first batch
        if rules is None:  # the cache moved meanwhile (another thread): read the rules whole
            rules = store._limits.parse_rules(connection.execute(store._q("load_rules"), {"known": None}).fetchone())
        self.rules = rules
        if sent is None or cached is None or rules is not cached[1]:
            if not self._take_turns(rules):
                # A queue these rules serialize came after one already held: taking its turn
                # now could deadlock with a claimer that waits the other way. Look again at once.
                return False
            sent = self._send_reads(rules)
        self._receive_reads(sent)
        return True

    def _lock_scopes(self, rows: Sequence[claiming.Row]) -> tuple[dict[str, int], dict[tuple[str, str], int] | None]:
        """Lock the scopes the candidates need and read their usage, and the running load of
        fair lanes when not known yet: the second batch, sent only when some rule asks."""
        store, connection, rules = self.store, self.connection, self.rules
        keys: list[str] = []
        if any(claiming.limited(queue, rules) for queue in self.queues):
            keys = claiming.scope_keys(rows, rules)
        lanes_cursor = None
        fair = claiming.fair_lanes(self.queues, rules)
        if fair and self.lanes is None:
            lanes_cursor = connection.execute(store._q("lane_load"), {"queues": fair})
        usage: dict[str, int] = {}
        if keys:
            connection.execute(store._q("upsert_scopes"), {"keys": keys})
            connection.execute(store._q("lock_scopes"), {"keys": keys})
            usage = dict(connection.execute(store._q("scope_usage_of"), {"keys": keys}).fetchall())
        lanes = self.lanes if lanes_cursor is None else lane_load(lanes_cursor)
        return usage, lanes

    def _record_block_reasons(self, decision: Admission, rows: Sequence[claiming.Row]) -> None:
        """Queue the write of every block reason that changed (it rides with the commit)."""
        changed = claiming.changed_block_reasons(decision, {row["id"]: row["block_reason"] for row in rows})
        if changed:
            reasons = [
                {"n": index, "id": run_id, "reason": json.loads(reason)}
                for index, (run_id, reason) in enumerate(changed.items())
            ]
            self.connection.execute(self.store._q("set_block_reasons"), {"reasons": payload_json(reasons)})

    def _send_claim(self, decision: Admission) -> psycopg.Cursor[Any]:
        """Queue the claim of the admitted runs (and the wake-up a full claim owes the fill order)."""
        store, connection = self.store, self.connection
        if len(decision.admitted) == self.limit and store._workers.fill_order.member(self.worker_id):
            # A full claim may leave work for the next worker in the fill order, which only looks when told.
            connection.execute(store._q("notify"))
        holders = [(need.key, candidate.id) for candidate, needs in decision.admitted for need in needs]
        return connection.execute(
            store._q("claim_runs"),
            {
                "ids": [candidate.id for candidate, _ in decision.admitted],
                "holder_scopes": [scope for scope, _ in holders],
                "holder_runs": [run_id for _, run_id in holders],
                "worker": self.worker_id,
                "lease": self.lease_seconds,
            },
        )

    def _take_turns(self, rules: Rules) -> bool:
        """Wait for this claimer's turn at every queue these rules serialize, in name order.

        A queue some limit applies to, or a fair queue, is claimed by one
        claimer at a time, as on SQLite: concurrent claimers would each lock
        (SKIP LOCKED) part of the head of the queue, and one whose share is all
        waiting (its local limit, a full partition) would find nothing while the
        runs it could start sit locked by another; and fair turns would be
        judged on running counts that change underneath. Queues no limit
        applies to keep claiming in parallel. Returns False, taking nothing, if
        a turn would be taken out of order (the rules changed mid-claim).
        """
        needed = sorted(
            {
                queue
                for queue in claiming.open_queues(self.queues, rules)
                if claiming.limited(queue, rules) or queue in claiming.fair_lanes([queue], rules)
            }
            - self.turns
        )
        if needed and self.turns and needed[0] < max(self.turns):
            return False
        for queue in needed:
            self.connection.execute(self.store._q("claim_turn"), {"queue": queue})
        self.turns.update(needed)
        return True

    def _next_due(self) -> psycopg.Cursor[Any]:
        return self.connection.execute(self.store._q("next_due"), {"queues": self.queues})

    # --- reads ------------------------------------------------------------------------

    def _send_reads(self, rules: Rules) -> dict[str, Any]:
        """Queue (without waiting) the reads these rules will ask for first: the head of each
        queue as `claiming` reads it first, usage, this worker's counts, fair lanes."""
        store, connection = self.store, self.connection
        sent: dict[str, Any] = {"windows": []}
        queues = claiming.open_queues(self.queues, rules)
        limited = [queue for queue in queues if claiming.limited(queue, rules)]
        plain = [queue for queue in queues if queue not in rules.queues or rules.queues[queue].ordering != "fair"]
        if plain:
            sizes = [claiming.window_size(queue, self.limit, rules) for queue in plain]
            cursor = connection.cursor(row_factory=dict_row).execute(
                store._q("claim_window"),
                {"queues": plain, "sizes": sizes, "tags": uses_tags(rules), "excluded": "[]"},
            )
            sent["windows"] = [(queue, size, cursor) for queue, size in zip(plain, sizes, strict=True)]
        if limited:
            sent["hint"] = connection.execute(store._q("scope_usage"))
            sent["local"] = connection.execute(store._q("local_usage"), {"worker": self.worker_id})
        fair = claiming.fair_lanes(self.queues, rules)
        if fair:
            sent["lanes"] = connection.execute(store._q("lane_load"), {"queues": fair})
        return sent

    def _receive_reads(self, sent: dict[str, Any]) -> None:
        rows_of: dict[str, list[dict[str, Any]]] = {}
        cursors = {id(cursor): cursor for _, _, cursor in sent["windows"]}
        for cursor in cursors.values():
            for row in cursor.fetchall():
                rows_of.setdefault(row["queue"], []).append(row)
        for queue, size, _ in sent["windows"]:
            self.windows[(queue, size, ())] = rows_of.get(queue, [])
        if "hint" in sent:
            self.hint = dict(sent["hint"].fetchall())
        if "local" in sent:
            self.local = local_usage(sent["local"])
        if "lanes" in sent:
            self.lanes = lane_load(sent["lanes"])

    def _window(self, queue: str, size: int, excluded: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
        key = (queue, size, tuple(excluded))
        if key not in self.windows:
            params = {
                "queues": [queue],
                "sizes": [size],
                "tags": uses_tags(self.rules),
                "excluded": excluded_json(excluded),
            }
            cursor = self.connection.cursor(row_factory=dict_row)
            self.windows[key] = cursor.execute(self.store._q("claim_window"), params).fetchall()
        return self.windows[key]

    def _partitions(self, queue: str, size: int) -> list[str]:
        """The partitions of a queue, with their heads read (and locked) in the same statement.

        Reads each head as `claiming` will ask for it (one run of a full
        partition, a fair share of the claim limit of the others, runs of
        full tags left out); any head asked for differently is read again.
        """
        saturated = sorted(
            claiming.saturated_partitions(queue, self.hint, self.rules)
            | claiming.locally_full_partitions(queue, self.local, self.rules)
        )
        excluded = tuple(claiming.saturated_tags(self.hint, self.rules))
        params = {
            "queue": queue,
            "limit": size,
            "saturated": saturated,
            "claim_limit": self.limit,
            "tags": uses_tags(self.rules),
            "excluded": excluded_json(excluded),
        }
        heads: dict[str, tuple[int, list[dict[str, Any]]]] = {}
        cursor = self.connection.cursor(row_factory=dict_row)
        for row in cursor.execute(self.store._q("claim_partitions"), params).fetchall():
            key, per_partition = row.pop("key"), row.pop("per_partition")
            read, rows = heads.setdefault(key, (1 if key in saturated else per_partition, []))
            if row["id"] is not None:
                rows.append(row)
        for key, (read, rows) in heads.items():
            rows.sort(key=claim_order)
            self.heads[(queue, key, excluded)] = (read, rows)
        return sorted(heads)  # bytewise, as the partition index orders them

    def _partition_head(
        self, queue: str, partition: str, size: int, excluded: Sequence[tuple[str, str]]
    ) -> list[dict[str, Any]]:
        known = self.heads.get((queue, partition, tuple(excluded)))
        if known is not None and (known[0] >= size or len(known[1]) < known[0]):
            return known[1][:size]  # read as many as asked, or all there were
        params = {
            "queue": queue,
            "partition": partition,
            "limit": size,
            "tags": uses_tags(self.rules),
            "excluded": excluded_json(excluded),
        }
        cursor = self.connection.cursor(row_factory=dict_row)
        return cursor.execute(self.store._q("claim_partition_head"), params).fetchall()
