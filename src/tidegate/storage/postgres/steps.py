"""PostgreSQL verbs of step-level gates: pools, step slots and step checkpoints.

One aggregate of the adapter (see `database.py`). Every verb is one
pipelined transaction. A claim share-locks its run row (the fence: no
takeover commits meanwhile), then locks the `tidegate_scopes` rows
of the scopes it asks for in key order, and only then reads limits and sums
holders: claimers of a scope queue up there instead of both seeing its last
free slot, and the common order rules out deadlocks between them. Times are
the server's (`tidegate_statement_timestamp()` once locks are held, `tidegate_now()` elsewhere).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tidegate.domain import events as history
from tidegate.domain.jsonvalue import dumps
from tidegate.domain.named_rates import RateVerdict, refundable, windows_from_json
from tidegate.domain.pools import UNCONFIGURED_LEASE_SECONDS, fanout_scope, holder_key, pool_of
from tidegate.domain.steps import FinishStepRequest, SlotGrant, SlotRequest, StepFinish, StepRecord, StepUpdate
from tidegate.storage import port
from tidegate.storage.port import Fence
from tidegate.storage.postgres.database import Aggregate
from tidegate.storage.postgres.payloads import to_json, to_time
from tidegate.storage.postgres.pipeline import transaction
from tidegate.storage.shared import rate_charges, records, slots, wakes
from tidegate.storage.shared.reads import StepReads
from tidegate.storage.shared.steps import OneStepAcquire

READ_COMMITTED = b"BEGIN ISOLATION LEVEL READ COMMITTED"  # each read after a lock sees every commit before it


class PostgresStepVerbs(OneStepAcquire, Aggregate, StepReads, port.StepVerbs):
    """The step verbs of the storage port."""

    # --- slots ----------------------------------------------------------------------

    def acquire_many(
        self, fence: Fence, worker_id: str, requests: Sequence[SlotRequest], strict: bool = False
    ) -> list[SlotGrant] | None:
        """Two round trips: fence, scope locks and reads; then the decisions' writes with the commit."""
        with self._connection() as connection, transaction(connection, READ_COMMITTED):
            run = connection.execute(self._q("step_fence"), {"run_id": fence[0], "attempt": fence[1]})
            self._lock_scopes(connection, _scopes(requests))
            reads = self._read_usage(connection, fence, requests)
            if run.fetchone() is None:
                return None  # only scope lock rows may be new: they hold nothing
            grants = []
            for decision in self._decide(fence, requests, reads):
                if decision.error is not None and strict:
                    raise decision.error
                self._apply(connection, fence, worker_id, decision, mark_waiting=True)
                grants.append(SlotGrant(False) if decision.error is not None else decision.grant())
        return grants

    def _read_usage(
        self, connection: psycopg.Connection[Any], fence: Fence, requests: Sequence[SlotRequest]
    ) -> tuple[psycopg.Cursor[Any] | None, ...]:
        """Queue the reads the decisions rest on (after the scope locks): limits, usage with what
        the asking steps hold, and the named rates they pay (their windows and states)."""
        scopes = sorted({scope for asked in requests for scope in asked.needs})
        names = slots.rate_names(requests)
        return (
            connection.execute(
                self._q("acquire_slots_limits"), {"pools": [p for p in map(pool_of, scopes) if p is not None]}
            ),
            connection.execute(
                self._q("acquire_slots_usage"),
                {"scopes": scopes, "holders": [holder_key(fence[0], asked.step_key) for asked in requests]},
            ),
            connection.execute(self._q("acquire_rates"), {"names": names}) if names else None,
            (
                connection.execute(self._q("acquire_rate_states"), {"scopes": slots.rate_scopes(requests)})
                if names
                else None
            ),
        )

    def _decide(
        self, fence: Fence, requests: Sequence[SlotRequest], reads: tuple[psycopg.Cursor[Any] | None, ...]
    ) -> list[slots.Decision]:
        limits, usage, rates, states = reads
        assert limits is not None and usage is not None  # always read
        pools = {name: (limit, lease) for name, limit, lease in limits.fetchall()}
        keys = {holder_key(fence[0], asked.step_key): asked.step_key for asked in requests}
        used, held = slots.tally_usage(usage.fetchall(), keys)
        return slots.decide_in_order(requests, pools, used, held, _rate_reads(rates, states))

    def _apply(
        self,
        connection: psycopg.Connection[Any],
        fence: Fence,
        worker_id: str,
        decision: slots.Decision,
        mark_waiting: bool,
    ) -> None:
        """Queue what a decision says: holder rows and StepSlotClaimed, or the step's waiting mark."""
        run_id, attempt = fence
        asked = decision.asked
        ids = {"run_id": run_id, "attempt": attempt, "step_key": asked.step_key}
        if decision.error is not None:
            return
        if not decision.granted:
            if mark_waiting:
                waiting = history.slots_waiting(attempt, asked.needs, decision.blocking, decision.rate_wait)
                connection.execute(
                    self._q("acquire_slots_waiting"),
                    {**ids, "needs": dumps(asked.waiting_for()), "metadata": dumps(waiting.metadata)},
                )
            return
        if decision.rates is not None and decision.rates.charges:
            self._charge(connection, fence, asked.step_key, decision.rates)
        if not decision.writes_holders:
            connection.execute(self._q("acquire_slots_granted"), ids)
            return
        request = decision.request
        wanted = [
            {"scope": scope, "slots": count, "lease": request.lease_of(scope)} for scope, count in asked.needs.items()
        ]
        connection.execute(
            self._q("acquire_slots"),
            {
                **ids,
                "holder": holder_key(run_id, asked.step_key),
                "worker": worker_id,
                "holders": dumps(wanted),
                "claimed": dumps(history.slots_claimed(attempt, asked.needs).metadata),
                "unconfigured": request.unconfigured(),
                "note": history.UNCONFIGURED_NOTE,
            },
        )

    def _charge(self, connection: psycopg.Connection[Any], fence: Fence, step_key: str, verdict: RateVerdict) -> None:
        """Queue the states a step's rate charge leaves, and keep the charge with the step (refunds)."""
        self._write_states(connection, verdict.states)
        charge = rate_charges.stored(verdict.charges)
        params = {"run_id": fence[0], "step_key": step_key, "attempt": fence[1], "charge": charge}
        connection.execute(self._q("keep_rate_charge"), params)

    def _write_states(self, connection: psycopg.Connection[Any], states: Mapping[tuple[str, int], int]) -> None:
        keys = sorted(states)
        params = {"scopes": [k[0] for k in keys], "windows": [k[1] for k in keys], "tats": [states[k] for k in keys]}
        connection.execute(self._q("write_rate_states"), params)

    def _refund(self, fence: Fence, step_key: str) -> None:
        """Give back a step's kept rate charge if it never started: the rates' scope rows locked, the
        charge taken off the step, its unspent part given back (`storage/shared/rate_charges.py`)."""
        run_id, attempt = fence
        params = {"run_id": run_id, "attempt": attempt, "step_key": step_key}
        with self._connection() as connection, transaction(connection, READ_COMMITTED):
            # The rates' scope rows first, then the step's row: the order of every step claim.
            kept = connection.execute(self._q("step_rate_charge"), params).fetchone()
            scopes = sorted({charge.scope for charge in rate_charges.charges_of(None if kept is None else kept[0])})
            if scopes:
                self._lock_scopes(connection, scopes)
            taken = connection.execute(self._q("take_rate_charge"), params).fetchone()
            if taken is None:
                return
            charges = [c for c in rate_charges.charges_of(taken[0]) if c.scope in scopes]
            if not refundable(charges, taken[1]):
                return
            read = connection.execute(self._q("acquire_rate_states"), {"scopes": scopes}).fetchall()
            now = read[0][0]
            stored = {(scope, window): tat for _, scope, window, tat in read if scope is not None}
            self._write_states(connection, rate_charges.refunded(stored, charges, now))
            wakes.everyone()  # tokens given back: a step waiting for the rate may start sooner

    def renew_slots(self, fence: Fence, step_key: str) -> bool:
        run_id, attempt = fence
        params = {
            "run_id": run_id,
            "attempt": attempt,
            "step_key": step_key,
            "holder": holder_key(run_id, step_key),
            "default_lease": UNCONFIGURED_LEASE_SECONDS,
        }
        with self._connection() as connection:  # one statement: its own transaction
            # fetchone() is typed Optional; this statement always returns one row
            return bool(connection.execute(self._q("renew_slots"), params).fetchone()[0])  # type: ignore[index]

    def release_slots(self, fence: Fence, step_key: str) -> None:
        run_id, attempt = fence
        params = {"run_id": run_id, "attempt": attempt, "step_key": step_key, "holder": holder_key(run_id, step_key)}
        with self._connection() as connection:
            # and the wake-up, when it freed any
            row = connection.execute(self._q("release_slots"), params).fetchone()
            wakes.sent_in_statement()
        if row is not None and row[1]:
            self._refund(fence, step_key)

    # --- steps ----------------------------------------------------------------------

    def record_steps(self, fence: Fence, steps: Sequence[StepUpdate]) -> bool:
        with self._connection() as connection:
            row = self._record(connection, fence, steps, wake=True).fetchone()
            wakes.sent_in_statement()
        # fetchone() is typed Optional; the steps' upsert always returns one row
        return bool(row[0])  # type: ignore[index]

    def finish_step(self, request: FinishStepRequest) -> StepFinish:
        """One round trip, or two when the store decides on a successor's grant (its scope locks,
        the record and the reads; then the grant's writes or the wake-up, with the commit)."""
        fence, worker_id, step, successor = request.fence, request.worker_id, request.step, request.successor
        if successor is None:
            return StepFinish(self.record_steps(fence, [step]))
        if request.successor_started is not None:
            return self._finish_handed_on(fence, worker_id, step, successor, request.successor_started)
        with self._connection() as connection, transaction(connection, READ_COMMITTED):
            # The successor's scope rows are locked before the finished step's holder rows, the
            # order every claim takes: a claimer of these scopes never holds what this one waits for.
            self._lock_scopes(connection, _scopes([successor]))
            recorded = self._record(connection, fence, [step], wake=False)
            reads = self._read_usage(connection, fence, [successor])
            state = self._pool_state(connection, fence, successor)
            # fetchone() is typed Optional; this statement always returns one row
            owned, freed, _ = recorded.fetchone()  # type: ignore[misc]
            if not owned:
                wakes.only_if(False)
                return StepFinish(False)
            # fetchone() is typed Optional; this statement always returns one row
            contested, over, _, waiting = state.fetchone()  # type: ignore[misc]
            finish = StepFinish(True, shared=contested or over)
            if waiting and not finish.shared:
                decision = self._decide(fence, [successor], reads)[0]
                self._apply(connection, fence, worker_id, decision, mark_waiting=False)
                if decision.writes_holders:  # a successor that held its slots already was handed nothing
                    finish = StepFinish(True, decision.grant(), decision.full)
            wakes.only_if(freed and finish.handed is None)  # slots stayed free: whoever waits may take them
        return finish

    def _finish_handed_on(
        self, fence: Fence, worker_id: str, step: StepUpdate, successor: SlotRequest, started: StepUpdate
    ) -> StepFinish:
        """One round trip: move the holders, record both steps (waking waiters for what stayed free).

        The scope rows are locked first, as by every claim: a claim of the
        successor's own (a try still on its way) commits before the move looks
        for the rows it holds, or waits until the move has committed."""
        run_id, attempt = fence
        with self._connection() as connection:
            with transaction(connection, READ_COMMITTED):
                # The finished step's claim created the scope rows: they need locking only.
                connection.execute(self._q("lock_scopes"), {"keys": sorted(successor.needs)})
                moving = connection.execute(
                    self._q("hand_on_holders"),
                    {
                        "run_id": run_id,
                        "attempt": attempt,
                        "from_key": step.step_key,
                        "to_key": successor.step_key,
                        "from_holder": holder_key(run_id, step.step_key),
                        "to_holder": holder_key(run_id, successor.step_key),
                        "worker": worker_id,
                        "needs": dumps(dict(successor.needs)),
                        "reason": history.handed_to(successor.step_key),
                        "default_lease": UNCONFIGURED_LEASE_SECONDS,
                    },
                )
                recorded = self._record(connection, fence, [step, started], wake=True)
                wakes.sent_in_statement()
                state = self._pool_state(connection, fence, successor)
            # fetchone() is typed Optional; this statement always returns one row
            owned = recorded.fetchone()[0]  # type: ignore[index]
            moved = moving.fetchall()
            # fetchone() is typed Optional; this statement always returns one row
            contested, over, full, _ = state.fetchone()  # type: ignore[misc]
            if not owned:
                return StepFinish(False)
            grant = slots.moved_grant(successor.needs, moved)
            if grant is None:  # not all moved: it may hold them by a try of its own (committed before)
                [decision] = self._decide(fence, [successor], self._read_usage(connection, fence, [successor]))
                grant = slots.held_grant(decision)
        return StepFinish(True, grant, full, contested or over)

    def _pool_state(self, connection: psycopg.Connection[Any], fence: Fence, asked: SlotRequest) -> psycopg.Cursor[Any]:
        """Queue the read of (contested, over its limit, full, still waiting) for `asked`: see
        `finish_step_pools`."""
        params = {
            "run_id": fence[0],
            "attempt": fence[1],
            "step_key": asked.step_key,
            "needs": dumps(dict(asked.needs)),
        }
        return connection.execute(self._q("finish_step_pools"), params)

    def _record(
        self, connection: psycopg.Connection[Any], fence: Fence, steps: Sequence[StepUpdate], wake: bool
    ) -> psycopg.Cursor[Any]:
        """Queue the upsert of the steps; its row: (fence held, holders freed, wake-ups sent)."""
        run_id, attempt = fence
        latest = {step.step_key: step for step in steps}  # an upsert may touch a row only once
        payload = []
        for index, step in enumerate(latest.values()):
            own = history.step_event(attempt, step)  # StepStarted, StepCompleted, StepFailed, or none
            payload.append(
                {
                    "n": index,
                    "step_key": step.step_key,
                    "map_key": step.map_key,
                    "item_index": step.item_index,
                    "status": step.status.value,
                    "output": step.output,
                    "error": step.error,
                    "event": None if own is None else own.type,
                    "metadata": None if own is None else own.metadata,
                }
            )
        return connection.execute(
            self._q("record_steps"), {"run_id": run_id, "attempt": attempt, "steps": dumps(payload), "wake": wake}
        )

    def next_map_item(self, fence: Fence, worker_id: str, map_key: str, window: int) -> StepRecord | None:
        """One round trip: fence, the window's scope lock, then take the item and its holder."""
        run_id, attempt = fence
        scope = fanout_scope(run_id, map_key)
        params = {
            "run_id": run_id,
            "attempt": attempt,
            "map_key": map_key,
            "scope": scope,
            "window": window,
            "worker": worker_id,
        }
        with self._connection() as connection:
            with transaction(connection, READ_COMMITTED):
                connection.execute(self._q("step_fence"), params)
                self._lock_scopes(connection, [scope])
                taken = connection.cursor(row_factory=dict_row).execute(self._q("next_map_item"), params)
            row = taken.fetchone()
        return None if row is None else records.step_record(row, to_time, to_json)

    # --- sweep ----------------------------------------------------------------------

    def sweep_step_holders(self, connection: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
        """Queue the sweep of step holders whose lease expired; its row counts the holders freed."""
        return connection.execute(self._q("sweep_step_holders"), {"reason": history.LEASE_EXPIRED})


def _scopes(requests: Sequence[SlotRequest]) -> list[str]:
    """Every scope row the requests' claim locks, in key order: their slots' and their named rates'."""
    return sorted({scope for asked in requests for scope in asked.needs} | set(slots.rate_scopes(requests)))


def _rate_reads(rates: psycopg.Cursor[Any] | None, states: psycopg.Cursor[Any] | None) -> slots.RateReads | None:
    """The named rates' windows and states as the decision reads them (None: no rate paid)."""
    if rates is None or states is None:
        return None
    windows = {name: windows_from_json(stored) or () for name, stored in rates.fetchall()}
    read = states.fetchall()
    found = {(scope, window): tat for _, scope, window, tat in read if scope is not None}
    return slots.RateReads(windows, found, read[0][0])
