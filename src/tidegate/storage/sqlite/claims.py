"""SQLite claims: the worker's cycle (report, then claim) and the claim inside it.

BEGIN IMMEDIATE serializes every claimer on SQLite, so the usage a claim
reads cannot change before its holders are written; `admit` decides.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from tidegate.domain import claim_plan, transitions
from tidegate.domain import events as history
from tidegate.domain.admission import LocalUsage, admit
from tidegate.domain.claim_plan import ClaimPlan
from tidegate.domain.integers import STORED_INT_MAX
from tidegate.domain.jsonvalue import dumps
from tidegate.domain.model import ClaimedRun, CycleRequest, CycleResult, Outcome, OutcomeKind
from tidegate.domain.rate_charger import earliest, recharge
from tidegate.domain.rates import RateStates, to_ns
from tidegate.storage import port
from tidegate.storage.port import Fence
from tidegate.storage.shared import adaptation, claiming, wakes
from tidegate.storage.sqlite.children import Children
from tidegate.storage.sqlite.database import Aggregate, Database
from tidegate.storage.sqlite.limits import Limits
from tidegate.storage.sqlite.payloads import claimed_run, event_row
from tidegate.storage.sqlite.workers import Workers


class Claims(Aggregate, port.ClaimVerbs):
    """The cycle verb of the storage port."""

    def __init__(self, db: Database, limits: Limits, workers: Workers, children: Children) -> None:
        super().__init__(db)
        self._limits = limits
        self._workers = workers
        self._children = children
        # The room the last claim of each set of queues left (`claiming.room_after`): whether the
        # next one reads its window's margin. Only a claim (under the write lock) sets it.
        self._room: dict[tuple[str, ...], int | None] = {}

    def cycle(self, request: CycleRequest) -> CycleResult:
        worker_id, queues, starts, outcomes = request.worker_id, request.queues, request.starts, request.outcomes
        claim_limit, plain = request.claim_limit, request.plain_limit
        if self._workers.fill_order.member(worker_id):  # a fill order's claim takes none ahead
            claim_limit = plain
        events: list[dict[str, Any]] = []
        fenced_out: list[Fence] = []
        claimed: list[ClaimedRun] = []
        more = False
        allowed_at: float | None = None
        with self._write() as (connection, now):
            if starts:
                for run_id, attempt in connection.execute(
                    self._q("cycle_reports_starts"), {"fences": json.dumps(starts), "worker": worker_id, "now": now}
                ).fetchall():
                    events.append(event_row(run_id, history.run_started(attempt, worker_id), now))
            if outcomes:
                fenced_out = self._record_outcomes(connection, worker_id, outcomes, events, now)
            recharged, allowed_at = self._recharge(connection, request, now) if request.recharge else ({}, None)
            cancel_requested = [
                (row[0], row[1]) for row in connection.execute(self._q("cancel_requests"), {"worker": worker_id})
            ]
            next_due_in = None
            if claim_limit > 0 and self._workers.fill_order.reads_registry(worker_id):
                queues = self._workers.fill_order_queues(connection, worker_id, queues, now)
                claim_limit = claim_limit if queues else 0
            if claim_limit > 0:
                claimed, more, claim_allowed_at, claim_limit = self._claim(
                    connection, worker_id, queues, (claim_limit, plain), request.lease_seconds, events, now
                )
                allowed_at = earliest(allowed_at, claim_allowed_at)
                if len(claimed) < claim_limit:
                    next_due_in = self._next_due_in(connection, queues, now)
            if events:
                connection.executemany(self._q("insert_event"), events)
        # Finished runs free capacity and may be waited on; a full claim by a worker in the
        # fill order may leave work for the next one, which only looks when told. Not this
        # worker when it claimed: the claim saw its outcomes, and a full claim turns again.
        wakes.only_if(
            outcomes or (self._workers.fill_order.member(worker_id) and claimed and len(claimed) == claim_limit)
        )
        wakes.named(worker_id if claim_limit > 0 else wakes.EVERYONE)
        allowed_in = None if allowed_at is None else allowed_at - now
        return CycleResult(claimed, fenced_out, cancel_requested, next_due_in, more, allowed_in, recharged)

    def _record_outcomes(
        self,
        connection: sqlite3.Connection,
        worker_id: str,
        outcomes: Sequence[Outcome],
        events: list[dict[str, Any]],
        now: float,
    ) -> list[Fence]:
        payload = []
        by_fence = {}
        for outcome in outcomes:
            status = transitions.outcome_status(outcome.kind.value, outcome.retry_delay)
            payload.append(
                {
                    "id": outcome.run_id,
                    "attempt": outcome.attempt,
                    "status": status,
                    "if_canceled": transitions.settle(status, cancel_requested=True),
                    "result": None if outcome.result is None else dumps(outcome.result),
                    "error": outcome.error,
                    "delay": outcome.retry_delay,
                    "snooze": outcome.kind is OutcomeKind.SNOOZED,
                }
            )
            by_fence[(outcome.run_id, outcome.attempt)] = outcome
        rows = connection.execute(
            self._q("cycle_reports"),
            {"outcomes": json.dumps(payload), "worker": worker_id, "now": now, "most_attempts": STORED_INT_MAX},
        ).fetchall()
        applied = {(row[0], row[1]): row[2] for row in rows}
        adapts = bool(rows) and self._limits.adapts()
        claimed_at = self._limits.claimed_at(connection, [row[0] for row in rows]) if adapts else {}
        if applied:
            connection.execute(self._q("release_holders"), {"ids": json.dumps([fence[0] for fence in applied])})
        for fence, outcome in by_fence.items():
            if fence in applied:
                snoozed = outcome.kind is OutcomeKind.SNOOZED
                event = history.attempt_ended(
                    applied[fence], outcome.attempt, outcome.error, outcome.retry_delay, snoozed, outcome.overloaded
                )
                events.append(event_row(outcome.run_id, event, now))
        if adapts:
            rows = [
                (run_id, n, queue, partition, claimed_at.get(run_id), charge)
                for run_id, n, _, queue, partition, charge in rows
            ]
            moved = self._limits.adapt(connection, adaptation.ended(outcomes, rows), now)
            events.extend(event_row(None, event, now) for event in moved)
        # A waiting parent whose last awaited child just ended goes back to the queue (after its end's
        # event); only a child's end can do that (the sweep's backstop resumes the rest).
        children = [fence[0] for fence in applied if by_fence[fence].has_parent]
        self._children.resume_parents(connection, children, events, now)
        return [fence for fence in by_fence if fence not in applied]

    def _claim(
        self,
        connection: sqlite3.Connection,
        worker_id: str,
        queues: Sequence[str],
        limits: tuple[int, int],
        lease_seconds: float,
        events: list[dict[str, Any]],
        now: float,
    ) -> tuple[list[ClaimedRun], bool, float | None, int]:
        """Read candidates and usage, let the pure policy decide, write its decision.

        `limits` is the claim limit and the free slots' worth of it (`CycleRequest.plain_limit`):
        a free claim takes up to the first, any other that many plus the runs past it that
        `admit` lets wait ahead (`ahead`). Returns the claimed runs, whether to claim
        again at once (the read was full, not everything in it could be taken this
        time, and no full limit that binds every run of the queues makes a second
        claim futile: `ClaimPlan.nothing_more`), when a run a rate held back may
        start (`Admission.next_allowed_at`), and the limit the claim applied.

        BEGIN IMMEDIATE already serializes every claimer on SQLite, so the
        usage read here cannot change before the holders are written.
        """
        rules = self._limits.load_rules(connection)
        plan = claim_plan.plan(queues, rules)
        capacity, ahead = claiming.admit_sizes(plan, limits[0], limits[0] - limits[1])
        limit = capacity + ahead  # none: `candidate_rows` reads nothing
        usage, live = self._usage(connection, plan, now)
        local = LocalUsage()
        if plan.local_counts:
            # Only per-worker caps read this worker's own counts; skip the query on the hot path otherwise.
            local = self._local_usage(connection, worker_id)
        reader = claiming.CandidateReader(
            window=lambda queue, size, excluded, suspects, held: connection.execute(
                self._q("claim_window"),
                {
                    "queue": queue,
                    "now": now,
                    "limit": size,
                    "excluded": json.dumps(excluded),
                    "suspects": suspects,
                    "held": json.dumps(list(held)),
                },
            ).fetchall(),
            partitions=lambda queue, size: [
                row[0] for row in connection.execute(self._q("claim_partitions"), {"queue": queue, "limit": size})
            ],
            partition_head=lambda queue, partition, size, excluded: connection.execute(
                self._q("claim_partition_head"),
                {"queue": queue, "partition": partition, "now": now, "limit": size, "excluded": json.dumps(excluded)},
            ).fetchall(),
        )
        margin = claiming.reads_margin(self._room.get(tuple(queues)), limit)
        found = claiming.candidate_rows(plan, limit, usage, reader, local, margin, live)
        rows = found.rows
        self._room[tuple(queues)] = None  # until a decision says how much room it left
        if not rows:
            return [], False, None, limit
        groups: dict[str, str] = {}
        suspects = claiming.suspect_ids(rows)
        if suspects:  # a worker runs one group of suspects at a time: read its own group, and theirs
            local = self._local_usage(connection, worker_id)
            groups = dict(connection.execute(self._q("suspect_groups"), {"ids": json.dumps(suspects)}).fetchall())
        lane_load = {
            (queue, partition): count
            for queue in plan.fair_lanes
            for partition, count in connection.execute(self._q("lane_load"), {"queue": queue})
        }
        candidates = [
            claiming.to_candidate(row, rules, json.loads(row["tags"]), row["scheduled_at"], groups.get(row["id"]))
            for row in rows
        ]
        # The states the decision charges are the live ones read with the usage: under this write
        # lock nothing moves them, and a state left unread is not after now, where GCRA charges a
        # window as it charges one never charged (`_usage`).
        live_states = None if live is None else live.states
        decision = admit(candidates, usage, rules, local, capacity, lane_load, live_states, now, ahead)
        self._room[tuple(queues)] = claiming.room_after(decision, usage, len(rows), limit)
        changed = claiming.changed_block_reasons(decision, {row["id"]: row["block_reason"] for row in rows})
        if changed:
            connection.execute(self._q("set_block_reasons"), {"reasons": json.dumps(list(changed.items()))})
            for run_id, reason in changed.items():
                events.append(event_row(run_id, history.run_blocked(json.loads(reason)), now))
        if not decision.admitted:
            return [], False, decision.next_allowed_at, limit
        admitted_ids = [candidate.id for candidate, _ in decision.admitted]
        charges = decision.charges  # a `Charge` is written as its fields (`domain.rates.Charge`)
        claimed_rows = connection.execute(
            self._q("claim_runs"),
            {
                "claims": json.dumps([[run_id, charges.get(run_id)] for run_id in admitted_ids]),
                "worker": worker_id,
                "now": now,
                "lease": lease_seconds,
            },
        ).fetchall()
        if decision.rate_states:
            states = [[scope, window, tat] for (scope, window), tat in sorted(decision.rate_states.items())]
            connection.execute(self._q("rate_states_write"), {"states": json.dumps(states)})
        order = {run_id: index for index, run_id in enumerate(admitted_ids)}
        leads = decision.leads
        claimed = sorted(
            (claimed_run(row, leads.get(row["id"])) for row in claimed_rows), key=lambda run: order[run.id]
        )
        attempts = {run.id: run.attempt for run in claimed}
        holders = [
            (need.key, candidate.id, attempts[candidate.id])
            for candidate, needs in decision.admitted
            for need in needs
            if candidate.id in attempts
        ]
        if holders:
            connection.execute(
                self._q("claim_runs_holders"),
                {"holders": json.dumps(holders), "worker": worker_id, "now": now, "lease": lease_seconds},
            )
        for run in claimed:
            events.append(event_row(run.id, history.run_dequeued(run.attempt, worker_id), now))
        short = len(claimed) < limit
        more = short and found.exhausted and not plan.nothing_more(usage, local, decision)
        return claimed, more, decision.next_allowed_at, limit

    def _recharge(
        self, connection: sqlite3.Connection, request: CycleRequest, now: float
    ) -> tuple[dict[str, float | None], float | None]:
        """Charge again this worker's runs taken ahead whose lead ran out (`rate_charger.recharge`):
        each recharged run's lead, and when the rates allow those left waiting."""
        rules = self._limits.load_rules(connection)
        fences = json.dumps(list(request.recharge))
        rows = {
            row["id"]: row
            for row in connection.execute(self._q("recharged_runs"), {"fences": fences, "worker": request.worker_id})
        }
        candidates = [
            claiming.to_candidate(row, rules, json.loads(row["tags"]), row["scheduled_at"])
            for row in (rows.get(run_id) for run_id, _ in request.recharge)
            if row is not None
        ]
        decided = recharge(
            candidates, self._limits.live_rates(connection, now).states, rules, now, request.recharge_at_once
        )
        if decided.rate_states:
            states = [[scope, window, tat] for (scope, window), tat in sorted(decided.rate_states.items())]
            connection.execute(self._q("rate_states_write"), {"states": json.dumps(states)})
        return decided.leads, decided.next_allowed_at

    def _usage(
        self, connection: sqlite3.Connection, plan: ClaimPlan, now: float
    ) -> tuple[dict[str, int], RateStates | None]:
        """The slots in use per scope and, when a run read may be charged a rate, the rate states that
        may refuse a start now (None: none may), in one statement.

        The states are those whose TAT is after now (less `claiming.STATE_SLACK_NS`): a window whose
        TAT is not after now allows any cost up to its burst and is charged from now, exactly as a
        window never charged (`domain.rates.take`; its charge's `before` is then None, and a refund
        or correction after now gives back the same: `domain.rates.unspent`). So they are both the
        read's hint (`claiming.candidate_rows`) and every state `admit` may charge. Where a rate
        adapts, a charge's `before` also says whether its window was in use: the states of its
        span back are read too (`Rules.adaptive_rate_span`).
        """
        if not any(plan.rules.has_rates(queue.name) for queue in plan.open):
            return dict(connection.execute(self._q("scope_usage"))), None
        usage: dict[str, int] = {}
        states: dict[tuple[str, int], int] = {}
        params = {"after": to_ns(now) - max(claiming.STATE_SLACK_NS, plan.rules.adaptive_rate_span)}
        for scope, count_or_window, tat in connection.execute(self._q("claim_usage_and_rates"), params):
            if tat is None:
                usage[scope] = count_or_window
            else:
                states[(scope, count_or_window)] = tat
        return usage, RateStates(states, now)

    def _local_usage(self, connection: sqlite3.Connection, worker_id: str) -> LocalUsage:
        """What this worker runs, per queue and per (queue, partition), and its group of suspects."""
        local = LocalUsage()
        for queue, partition, count, group in connection.execute(self._q("local_usage"), {"worker": worker_id}):
            local.per_queue[queue] = local.per_queue.get(queue, 0) + count
            local.per_partition[(queue, partition)] = count
            local.suspect_group = local.suspect_group or group
        return local

    def _next_due_in(self, connection: sqlite3.Connection, queues: Sequence[str], now: float) -> float | None:
        dues = [connection.execute(self._q("next_due"), {"queue": queue, "now": now}).fetchone()[0] for queue in queues]
        known = [due for due in dues if due is not None]
        return min(known) if known else None
