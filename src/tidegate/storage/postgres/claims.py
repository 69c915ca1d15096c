"""PostgreSQL claims: the worker's cycle (report, then claim).

A cycle is one transaction: it records the worker's starts and outcomes,
claims, and reads the cancel requests. How it claims is a path the claim plan
picks on the rules this store has cached (`Claims._path`):

- nothing to claim (a claim limit of 0, or no queue): the reports alone, one batch;
- free (`ClaimPlan.free`): one statement that reads the windows and claims,
  sent with the reports and committed in the same round trip (free_claims.py);
  when it refuses (the rules moved, or a suspect was among its runs), a second
  transaction claims the general way;
- general (a limit, a local cap or fair ordering applies): it reads
  candidates, locks the scopes they need, lets `admit` decide and writes the
  decision in the same transaction (claim.py, its reads in claim_reads.py),
  READ COMMITTED whatever the server's default: the usage read must see every
  claim committed before the scope lock was granted.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import psycopg

from tidegate.domain import claim_plan
from tidegate.domain.integers import STORED_INT_MAX
from tidegate.domain.model import ClaimedRun, CycleRequest, CycleResult
from tidegate.domain.rate_charger import earliest
from tidegate.storage import port
from tidegate.storage.postgres import free_claims, recharges
from tidegate.storage.postgres.children import Children
from tidegate.storage.postgres.claim import Claim
from tidegate.storage.postgres.claim_scopes import ScopeForecast
from tidegate.storage.postgres.database import Aggregate, Database
from tidegate.storage.postgres.limits import Limits
from tidegate.storage.postgres.payloads import claimed_run, outcome_payload, start_arrays
from tidegate.storage.postgres.pipeline import implicit_transaction, transaction
from tidegate.storage.postgres.workers import Workers
from tidegate.storage.shared import adaptation, wakes

READ_COMMITTED = b"BEGIN ISOLATION LEVEL READ COMMITTED"


@dataclasses.dataclass(frozen=True)
class _Claimed:
    """What a cycle's claim took, read after the commit."""

    claimed: list[ClaimedRun] = dataclasses.field(default_factory=list)
    next_due_in: float | None = None
    more: bool = False
    next_allowed_in: float | None = None
    refused: bool = False  # the one statement refused: claim again the general way


Received = Callable[[], _Claimed]  # reads a sent claim's rows, after the commit


def _nothing_claimed() -> _Claimed:
    return _Claimed()


@dataclasses.dataclass(frozen=True)
class _Path:
    """How one cycle's transaction claims."""

    send: Callable[[psycopg.Connection[Any]], Received]  # queues the claim's statements
    one_batch: bool  # nothing is read before the commit: an implicit transaction, one round trip
    claims: bool  # the claim sees all that the commit announces: its own worker may pass the wake-up over


class Claims(Aggregate, port.ClaimVerbs):
    """The cycle verb of the storage port."""

    def __init__(self, db: Database, limits: Limits, workers: Workers, children: Children) -> None:
        super().__init__(db)
        self._limits = limits
        self._workers = workers
        self._children = children
        self.forecast = ScopeForecast()  # the scopes a limited claim locks in its first batch (look.py too)

    def cycle(self, request: CycleRequest) -> CycleResult:
        """Report, then claim, in one transaction of pipelined batches.

        The first batch records starts and outcomes (releasing the scopes of
        ended attempts) and sends the claim's first statements; the commit
        travels with the last batch, with the read of cancel requests. A worker
        that reports nothing and claims nothing (a full worker woken) only looks
        for cancels: one read. A worker in the fill order above rank 0 first
        reads the registry (one more round trip).
        """
        recharged: dict[str, float | None] = {}
        allowed_in = None
        if request.recharge:
            recharged, allowed_in = self._recharge(request)
        if not (request.starts or request.outcomes or request.claim_limit > 0):
            rows = self._fetchall("cancel_requests", {"worker": request.worker_id})
            return CycleResult([], [], [(row[0], row[1]) for row in rows], None, False, allowed_in, recharged)
        result, refused = self._cycle(request, self._path(request))
        if refused:
            again, _ = self._cycle(dataclasses.replace(request, starts=(), outcomes=()), self._general_path(request))
            result = dataclasses.replace(again, fenced_out=result.fenced_out)
        if request.recharge:
            allowed_in = earliest(allowed_in, result.next_allowed_in)
            result = dataclasses.replace(result, recharged=recharged, next_allowed_in=allowed_in)
        return result

    def _recharge(self, request: CycleRequest) -> tuple[dict[str, float | None], float | None]:
        """Charge again the runs taken ahead whose lead ran out (recharges.py), in a transaction of
        its own: each recharged run's lead, and in how long the rates allow those left waiting."""
        with self._connection() as connection, transaction(connection, READ_COMMITTED):
            decided, now = recharges.recharged(connection, self._q, self._limits, request)
        allowed = decided.next_allowed_at
        return decided.leads, None if allowed is None else allowed - now

    def _path(self, request: CycleRequest) -> _Path:
        """The path the claim plan picks on the cached rules (no rules cached yet: the general
        claim reads them). A fill-order member's full claim owes the next rank a wake-up, which
        only the general claim sends."""
        if request.claim_limit <= 0 or not request.queues:
            return _Path(lambda _: _nothing_claimed, one_batch=True, claims=False)
        cached = self._limits.cached
        if cached is None or self._workers.fill_order.member(request.worker_id):
            return self._general_path(request)
        version, rules = cached
        plan = claim_plan.plan(request.queues, rules)
        if not plan.free:
            return self._general_path(request)
        # Free on the cached rules: the statement refuses if they changed, and the general
        # claim then takes the runs ahead `admit` lets wait (`CycleRequest.claim_ahead`).
        send = functools.partial(self._send_free, request, version, plan.open_names)
        return _Path(send, one_batch=True, claims=True)

    def _general_path(self, request: CycleRequest) -> _Path:
        """The general claim takes the runs ahead of the worker's free slots that `admit` lets wait
        (`CycleRequest.claim_ahead`), a fill order's member none: with no slot free it only reports."""
        if request.plain_limit <= 0 or self._workers.fill_order.member(request.worker_id):
            request = dataclasses.replace(request, claim_limit=request.plain_limit, claim_ahead=0)
        if request.claim_limit <= 0:
            return _Path(lambda _: _nothing_claimed, one_batch=True, claims=False)
        claims = not self._workers.fill_order.reads_registry(request.worker_id)
        return _Path(functools.partial(self._send_general, request), one_batch=False, claims=claims)

    def _cycle(self, request: CycleRequest, path: _Path) -> tuple[CycleResult, bool]:
        """One cycle's transaction on `path`; and whether its one-statement claim refused."""
        reported, outcome_json = outcome_payload(request.outcomes)
        adapts = bool(request.outcomes) and self._limits.adapts()  # reads its outcomes back before it commits
        with self._connection() as connection:
            one_batch = path.one_batch and not adapts
            with implicit_transaction(connection) if one_batch else transaction(connection, READ_COMMITTED):
                applied = self._report(connection, request, outcome_json, adapts, path.claims)
                received = path.send(connection)
                # After the claim: with a one-statement claim the stall a race test puts here
                # (tests/contract/test_free_claims.py) holds the claim fence and the claimed rows.
                cancels = connection.execute(self._q("cancel_requests"), {"worker": request.worker_id})
            applied_fences = {(row[0], row[1]) for row in applied()}
            cancel_requested = [(row[0], row[1]) for row in cancels.fetchall()]
            claim = received()
        fenced_out = [fence for fence in reported if fence not in applied_fences]
        result = CycleResult(
            claim.claimed, fenced_out, cancel_requested, claim.next_due_in, claim.more, claim.next_allowed_in
        )
        return result, claim.refused

    def _report(
        self,
        connection: psycopg.Connection[Any],
        request: CycleRequest,
        outcome_json: str,
        adapts: bool,
        claims: bool,
    ) -> Callable[[], list[Any]]:
        """Send the cycle's starts and outcomes (`outcome_json`, the outcomes' payload); their applied
        rows, read when asked (after the commit), unless adaptive limits read them now: then the
        outcomes move those limits before the claim."""
        starts, outcomes, worker_id = request.starts, request.outcomes, request.worker_id
        wakes.only_if(outcomes)  # finished runs may be waited on, and free capacity
        if not (starts or outcomes):
            return list
        params = {
            **start_arrays(starts), "outcomes": outcome_json, "worker": worker_id, "most_attempts": STORED_INT_MAX,
            "adapts": adapts,
        }  # fmt: skip
        applied = connection.execute(self._q("cycle_reports"), params)
        read: Callable[[], list[Any]] = applied.fetchall
        if adapts:
            rows = applied.fetchall()
            self._limits.adapt(connection, adaptation.ended(outcomes, rows))
            read = lambda: rows  # noqa: E731
        if outcomes:
            # A waiting parent whose last awaited child just ended goes back to the queue;
            # only a child's end can do that (the sweep's backstop resumes the rest).
            children = [outcome.run_id for outcome in outcomes if outcome.has_parent]
            if children:
                self._children.resume_parents(connection, children)
            # When the claim is made, it sees all that this commit announces: the worker's own
            # listener may pass the wake-up over. A cycle that claims nothing wakes its own worker too.
            wakes.named(worker_id if claims else wakes.EVERYONE)
        return read

    def _send_free(
        self, request: CycleRequest, version: str, open_queues: list[str], connection: psycopg.Connection[Any]
    ) -> Received:
        """The one-statement claim, on the rules `version` it was planned on (free_claims.py)."""
        connection.execute(self._q("claim_fence"))
        cursor = free_claims.send(
            connection,
            self._q("claim_runs_free"),
            version,
            open_queues,
            request.worker_id,
            request.claim_limit,
            request.lease_seconds,
        )

        def received() -> _Claimed:
            found = free_claims.received(cursor)
            return _Claimed(found.claimed, found.next_due_in, refused=found.refused)

        return received

    def _send_general(self, request: CycleRequest, connection: psycopg.Connection[Any]) -> Received:
        """The general claim: where a limit, a local cap or fair ordering applies (claim.py)."""
        worker_id, queues = request.worker_id, list(request.queues)
        if self._workers.fill_order.reads_registry(worker_id):
            queues = self._workers.fill_order_queues(connection, worker_id, queues)
            if not queues:
                return _nothing_claimed
        connection.execute(self._q("claim_fence"))
        member = self._workers.fill_order.member(worker_id)
        limited = Claim(
            self._q,
            self._limits,
            self.forecast,
            member,
            connection,
            worker_id,
            queues,
            request.claim_limit,
            request.claim_ahead,
            request.lease_seconds,
        )
        claim, due, more = limited.run()
        allowed_in = limited.next_allowed_in

        def received() -> _Claimed:
            leads = limited.leads
            claimed = [] if claim is None else [claimed_run(row, leads.get(row[0])) for row in claim.fetchall()]
            # fetchone() is typed Optional; this statement always returns one row
            next_due_in = None if due is None else due.fetchone()[0]  # type: ignore[index]
            return _Claimed(claimed, next_due_in, more, allowed_in)

        return received
