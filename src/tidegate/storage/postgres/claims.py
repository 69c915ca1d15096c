"""PostgreSQL claims: the worker's cycle (report, then claim).

The claim inside it is one statement where no limit applies, and the whole
cycle one round trip (free_claims.py); elsewhere it reads candidates, locks
the scopes they need, lets `admit` decide and writes the decision in the
same transaction (claim.py, its reads in claim_reads.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from tidegate.domain import claim_plan
from tidegate.domain.integers import STORED_INT_MAX
from tidegate.domain.model import CycleRequest, CycleResult, Outcome
from tidegate.storage import port
from tidegate.storage.shared import adaptation
from tidegate.storage.port import Fence
from tidegate.storage.postgres import free_claims
from tidegate.storage.postgres.children import Children
from tidegate.storage.postgres.claim import Claim
from tidegate.storage.postgres.claim_scopes import ScopeForecast
from tidegate.storage.postgres.database import Aggregate, Database
from tidegate.storage.postgres.limits import Limits
from tidegate.storage.postgres.payloads import claimed_run, outcome_payload, start_arrays
from tidegate.storage.postgres.pipeline import implicit_transaction, transaction
from tidegate.storage.postgres.workers import Workers
from tidegate.storage.shared import wakes


class Claims(Aggregate, port.ClaimVerbs):
    """The cycle verb of the storage port."""

    def __init__(self, db: Database, limits: Limits, workers: Workers, children: Children) -> None:
        super().__init__(db)
        self._limits = limits
        self._workers = workers
        self._children = children
        self.forecast = ScopeForecast()  # the scopes a limited claim locks in its first batch (guard.py too)

    def cycle(self, request: CycleRequest) -> CycleResult:
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
        worker_id, queues, starts, outcomes = request.worker_id, request.queues, request.starts, request.outcomes
        claim_limit, lease_seconds = request.claim_limit, request.lease_seconds
        if not (starts or outcomes or claim_limit > 0):  # a full worker woken looks for cancels: one read
            cancels = [(row[0], row[1]) for row in self._fetchall("cancel_requests", {"worker": worker_id})]
            return CycleResult([], [], cancels, None, False)
        result, refused = self._cycle(worker_id, queues, starts, outcomes, claim_limit, lease_seconds, free=True)
        if not refused:
            return result
        again, _ = self._cycle(worker_id, queues, [], [], claim_limit, lease_seconds, free=False)
        return dataclasses.replace(again, fenced_out=result.fenced_out)

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
            chosen = self._free_choice(queue_list)  # a member's full claim notifies: not here
        with self._connection() as connection:
            # A cycle that reads nothing before it commits is one batch: an implicit transaction.
            adapts = bool(outcomes) and self._limits.adapts()  # reads its outcomes back before it commits
            one_batch = not adapts and (chosen is not None or claim_limit <= 0 or not queue_list)
            begin = b"BEGIN ISOLATION LEVEL READ COMMITTED"
            with implicit_transaction(connection) if one_batch else transaction(connection, begin):
                wakes.only_if(outcomes)  # finished runs may be waited on, and free capacity
                applied = self._report(connection, worker_id, starts, outcomes, outcome_json, adapts)
                if outcomes:
                    # A waiting parent whose last awaited child just ended goes back to the queue;
                    # only a child's end can do that (the sweep's backstop resumes the rest).
                    children = [outcome.run_id for outcome in outcomes if outcome.has_parent]
                    if children:
                        self._children.resume_parents(connection, children)
                    # When the claim below is made, it sees all that this commit announces: the
                    # worker's own listener may pass the wake-up over. A cycle that claims nothing
                    # wakes its own worker too.
                    claims = claim_limit > 0 and queue_list and not self._workers.fill_order.reads_registry(worker_id)
                    wakes.named(worker_id if claims else wakes.EVERYONE)
                claim, due, more, one_statement, allowed_in = None, None, False, None, None
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
                        limited = Claim(
                            self._q,
                            self._limits,
                            self.forecast,
                            self._workers.fill_order.member(worker_id),
                            connection,
                            worker_id,
                            queue_list,
                            claim_limit,
                            lease_seconds,
                        )
                        claim, due, more = limited.run()
                        allowed_in = limited.next_allowed_in
                # After the claim: with a one-statement claim the stall a race test puts here
                # (tests/contract/test_free_claims.py) holds the claim fence and the claimed rows.
                cancels = connection.execute(self._q("cancel_requests"), {"worker": worker_id})
            applied_fences = {(row[0], row[1]) for row in applied()}
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
        return CycleResult(claimed, fenced_out, cancel_requested, next_due_in, more, allowed_in), refused

    def _report(
        self,
        connection: psycopg.Connection[Any],
        worker_id: str,
        starts: Sequence[Fence],
        outcomes: Sequence[Outcome],
        outcome_json: str,
        adapts: bool,
    ) -> Callable[[], list[Any]]:
        """Send the cycle's starts and outcomes; their applied rows, read when asked (after the commit),
        unless adaptive limits read them now: then the outcomes move those limits before the claim."""
        if not (starts or outcomes):
            return list
        params = {
            **start_arrays(starts), "outcomes": outcome_json, "worker": worker_id, "most_attempts": STORED_INT_MAX
        }  # fmt: skip
        applied = connection.execute(self._q("cycle_reports"), params)
        if not adapts:
            return applied.fetchall
        rows = applied.fetchall()
        self._limits.adapt(connection, adaptation.ended(outcomes, rows))
        return lambda: rows

    def _free_choice(self, queues: list[str]) -> tuple[str, list[str]] | None:
        """The cached rules version and the open queues to claim from in one statement, when the
        plan on those rules is free (no rules cached yet: the general claim reads them)."""
        cached = self._limits.cached
        if cached is None:
            return None
        plan = claim_plan.plan(queues, cached[1])
        return (cached[0], plan.open_names) if plan.free else None
