"""SQLite verbs of step-level gates: pools, step slots and step checkpoints.

One aggregate of the adapter (see `database.py`). Every verb is one
`BEGIN IMMEDIATE` transaction, and SQLite's single writer is what makes
check-and-insert of slots atomic against every other claimer: the usage
read cannot change before the holder rows are written.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from tidegate.domain import events as history
from tidegate.domain.jsonvalue import dumps
from tidegate.domain.named_rates import RateVerdict, refundable, windows_from_json
from tidegate.domain.pools import UNCONFIGURED_LEASE_SECONDS, fanout_scope, holder_key
from tidegate.domain.steps import (
    FinishStepRequest,
    SlotGrant,
    SlotRequest,
    StepFinish,
    StepRecord,
    StepStatus,
    StepUpdate,
)
from tidegate.domain.transitions import has_room
from tidegate.storage import port
from tidegate.storage.port import Fence
from tidegate.storage.shared import rate_charges, records, slots, wakes
from tidegate.storage.shared.reads import StepReads
from tidegate.storage.shared.steps import OneStepAcquire
from tidegate.storage.sqlite.database import Aggregate
from tidegate.storage.sqlite.payloads import event_row, to_json, to_time


class SQLiteStepVerbs(OneStepAcquire, Aggregate, StepReads, port.StepVerbs):
    """The step verbs of the storage port."""

    # --- slots ----------------------------------------------------------------------

    def acquire_many(
        self, fence: Fence, worker_id: str, requests: Sequence[SlotRequest], strict: bool = False
    ) -> list[SlotGrant] | None:
        with self._write() as (connection, now):
            run = connection.execute(self._q("step_fence"), {"run_id": fence[0], "attempt": fence[1]}).fetchone()
            if run is None:
                return None
            grants = []
            for decision in self._decide(connection, fence, requests, now):
                if decision.error is not None and strict:
                    raise decision.error
                self._apply(connection, fence, worker_id, decision, run[0], now, mark_waiting=True)
                grants.append(SlotGrant(False) if decision.error is not None else decision.grant())
        return grants

    def _decide(
        self, connection: sqlite3.Connection, fence: Fence, requests: Sequence[SlotRequest], now: float
    ) -> list[slots.Decision]:
        """Read the limits and usage of every scope asked for (and the named rates paid), then judge
        the requests in order."""
        scopes = json.dumps(sorted({scope for asked in requests for scope in asked.needs}))
        holders = {holder_key(fence[0], asked.step_key): asked.step_key for asked in requests}
        pools = {
            row[0]: (row[1], row[2]) for row in connection.execute(self._q("acquire_slots_limits"), {"scopes": scopes})
        }
        rows = connection.execute(
            self._q("acquire_slots_usage"), {"scopes": scopes, "holders": json.dumps(sorted(holders))}
        )
        used, held = slots.tally_usage(((scope, total, to_json(mine)) for scope, total, mine in rows), holders)
        return slots.decide_in_order(requests, pools, used, held, self._read_rates(connection, requests, now))

    def _read_rates(
        self, connection: sqlite3.Connection, requests: Sequence[SlotRequest], now: float
    ) -> slots.RateReads | None:
        """The named rates the requests pay: their windows in force and stored states (None: none paid)."""
        names = slots.rate_names(requests)
        if not names:
            return None
        found = connection.execute(self._q("acquire_rates"), {"names": json.dumps(names)})
        windows = {name: windows_from_json(text) or () for name, text in found}
        states = connection.execute(self._q("acquire_rate_states"), {"scopes": json.dumps(slots.rate_scopes(requests))})
        return slots.RateReads(windows, {(scope, window): tat for scope, window, tat in states}, now)

    def _apply(
        self,
        connection: sqlite3.Connection,
        fence: Fence,
        worker_id: str,
        decision: slots.Decision,
        run_lease_expires: float,
        now: float,
        mark_waiting: bool,
    ) -> None:
        """Write what a decision says: holder rows and StepSlotClaimed, or the step's waiting mark."""
        run_id, attempt = fence
        asked = decision.asked
        if decision.error is not None:
            return
        if not decision.granted:
            if not mark_waiting:
                return
            first = connection.execute(
                self._q("acquire_slots_waiting"),
                {"run_id": run_id, "step_key": asked.step_key, "needs": dumps(asked.waiting_for()), "attempt": attempt},
            ).fetchone()
            if first is not None:  # only its first wait under this attempt (or for other slots) gets the event
                waiting = history.slots_waiting(attempt, asked.needs, decision.blocking, decision.rate_wait)
                connection.execute(self._q("insert_event"), event_row(run_id, waiting, now, asked.step_key))
            return
        if decision.writes_holders:
            holder = holder_key(run_id, asked.step_key)
            self._hold(connection, run_id, attempt, worker_id, holder, decision.request, run_lease_expires, now)
            events = [event_row(run_id, history.slots_claimed(attempt, asked.needs), now, asked.step_key)]
            for pool in decision.request.unconfigured():
                connection.execute(self._q("acquire_slots_asked"), {"pool": pool, "now": now})
                seen = connection.execute(self._q("acquire_slots_unconfigured_seen"), {"run_id": run_id, "pool": pool})
                if seen.fetchone() is None:
                    events.append(event_row(run_id, history.pool_unconfigured(pool), now, asked.step_key))
            connection.executemany(self._q("insert_event"), events)
        if decision.rates is not None and decision.rates.charges:
            self._charge(connection, fence, asked.step_key, decision.rates)
        connection.execute(self._q("acquire_slots_granted"), {"run_id": run_id, "step_key": asked.step_key})

    def _charge(self, connection: sqlite3.Connection, fence: Fence, step_key: str, verdict: RateVerdict) -> None:
        """Write the states a step's rate charge leaves, and keep the charge with the step (refunds)."""
        states = [[scope, window, tat] for (scope, window), tat in sorted(verdict.states.items())]
        connection.execute(self._q("write_rate_states"), {"states": json.dumps(states)})
        charge = rate_charges.stored(verdict.charges)
        params = {"run_id": fence[0], "step_key": step_key, "attempt": fence[1], "charge": charge}
        connection.execute(self._q("keep_rate_charge"), params)

    def _refund(self, connection: sqlite3.Connection, run_id: str, step_key: str, now: float) -> bool:
        """Give back a step's kept rate charge if it never started; True if it gave any back."""
        row = connection.execute(self._q("step_rate_charge"), {"run_id": run_id, "step_key": step_key}).fetchone()
        if row is None:
            return False
        charges = rate_charges.charges_of(row["rate_charge"])
        connection.execute(self._q("take_rate_charge"), {"run_id": run_id, "step_key": step_key})
        if not refundable(charges, row["started_at"]):
            return False
        rate_charges.give_back(self._rate_windows(connection, now), [charges])  # as a run's hand-back
        return True

    def _hold(
        self,
        connection: sqlite3.Connection,
        run_id: str,
        attempt: int,
        worker_id: str,
        holder: str,
        request: slots.Request,
        run_lease_expires: float,
        now: float,
    ) -> None:
        rows = []
        for scope, count in request.needs.items():
            lease = request.lease_of(scope)
            rows.append((scope, count, run_lease_expires if lease is None else now + lease))
        connection.execute(
            self._q("acquire_slots"),
            {
                "holders": json.dumps(rows),
                "holder": holder,
                "run_id": run_id,
                "attempt": attempt,
                "worker": worker_id,
                "now": now,
            },
        )

    def renew_slots(self, fence: Fence, step_key: str) -> bool:
        run_id, attempt = fence
        with self._write() as (connection, now):
            if connection.execute(self._q("step_fence"), {"run_id": run_id, "attempt": attempt}).fetchone() is None:
                return False
            renewed = [
                row[0]
                for row in connection.execute(
                    self._q("renew_slots"),
                    {
                        "holder": holder_key(run_id, step_key),
                        "attempt": attempt,
                        "now": now,
                        "default_lease": UNCONFIGURED_LEASE_SECONDS,
                    },
                )
            ]
            if renewed:
                renewal = history.slots_renewed(attempt, renewed)
                connection.execute(self._q("insert_event"), event_row(run_id, renewal, now, step_key))
        return bool(renewed)

    def release_slots(self, fence: Fence, step_key: str) -> None:
        run_id, attempt = fence
        with self._write() as (connection, now):
            if connection.execute(self._q("step_fence"), {"run_id": run_id, "attempt": attempt}).fetchone() is None:
                wakes.only_if(False)
                return
            freed = dict(
                connection.execute(
                    self._q("release_slots"), {"holder": holder_key(run_id, step_key), "attempt": attempt}
                ).fetchall()
            )
            if freed:
                released = history.slots_released(attempt, freed, history.SLOTS_RELEASED)
                connection.execute(self._q("insert_event"), event_row(run_id, released, now, step_key))
            refunded = self._refund(connection, run_id, step_key, now)
        wakes.only_if(freed or refunded)

    # --- steps ----------------------------------------------------------------------

    def record_steps(self, fence: Fence, steps: Sequence[StepUpdate]) -> bool:
        with self._write() as (connection, now):
            if connection.execute(self._q("step_fence"), {"run_id": fence[0], "attempt": fence[1]}).fetchone() is None:
                wakes.only_if(False)
                return False
            freed = self._record(connection, fence, steps, now)
        wakes.only_if(freed)
        return True

    def finish_step(self, request: FinishStepRequest) -> StepFinish:
        fence, worker_id, step, successor = request.fence, request.worker_id, request.step, request.successor
        successor_started = request.successor_started
        run_id, attempt = fence
        with self._write() as (connection, now):
            run = connection.execute(self._q("step_fence"), {"run_id": run_id, "attempt": attempt}).fetchone()
            if run is None:
                wakes.only_if(False)
                return StepFinish(False)
            if successor is None:
                freed = self._record(connection, fence, [step], now)
                finish = StepFinish(True)
            elif successor_started is not None:
                moved = self._hand_on(connection, fence, worker_id, step.step_key, successor, now)
                freed = self._record(connection, fence, [step, successor_started], now)
                contested, over, full, _ = self._pool_state(connection, fence, successor)
                grant = slots.moved_grant(successor.needs, moved)
                if grant is None:  # not all moved: it may hold them by a try of its own
                    grant = slots.held_grant(self._decide(connection, fence, [successor], now)[0])
                finish = StepFinish(True, grant, bool(full), bool(contested or over))
            else:
                freed = self._record(connection, fence, [step], now)
                contested, over, _, waiting = self._pool_state(connection, fence, successor)
                finish = StepFinish(True, shared=bool(contested or over))
                if waiting and not finish.shared:
                    decision = self._decide(connection, fence, [successor], now)[0]
                    self._apply(connection, fence, worker_id, decision, run[0], now, mark_waiting=False)
                    if decision.writes_holders:  # a successor that held its slots already was handed nothing
                        finish = StepFinish(True, decision.grant(), decision.full)
                        freed = False
        wakes.only_if(freed)  # slots stayed free: whoever waits for them may take them
        return finish

    def _pool_state(self, connection: sqlite3.Connection, fence: Fence, asked: SlotRequest) -> tuple[int, ...]:
        """(contested, over its limit, full, still waiting) for `asked`: see `finish_step_pools`."""
        row = connection.execute(
            self._q("finish_step_pools"),
            {
                "run_id": fence[0],
                "attempt": fence[1],
                "step_key": asked.step_key,
                "needs": json.dumps(dict(asked.needs)),
            },
        ).fetchone()
        return tuple(row)

    def _hand_on(
        self, connection: sqlite3.Connection, fence: Fence, worker_id: str, from_key: str, to: SlotRequest, now: float
    ) -> list[tuple[str, int, float]]:
        """Move the finished step's holders of `to`'s scopes to `to`, with their events; the rows
        moved: (scope, slots, lease seconds)."""
        run_id, attempt = fence
        moved = [
            (scope, count, lease)
            for scope, count, lease in connection.execute(
                self._q("hand_on_holders"),
                {
                    "from_holder": holder_key(run_id, from_key),
                    "to_holder": holder_key(run_id, to.step_key),
                    "attempt": attempt,
                    "worker": worker_id,
                    "needs": json.dumps(dict(to.needs)),
                    "now": now,
                    "default_lease": UNCONFIGURED_LEASE_SECONDS,
                },
            )
        ]
        pools = history.only_pools({scope: count for scope, count, _ in moved})
        if pools:
            released = history.slots_released(attempt, pools, history.handed_to(to.step_key))
            claimed = history.slots_claimed(attempt, pools, handed_from=from_key)
            connection.executemany(
                self._q("insert_event"),
                [event_row(run_id, released, now, from_key), event_row(run_id, claimed, now, to.step_key)],
            )
        return moved

    def _record(self, connection: sqlite3.Connection, fence: Fence, steps: Sequence[StepUpdate], now: float) -> bool:
        """Upsert the steps and their events; a finished step frees its holders. True if any were freed."""
        run_id, attempt = fence
        by_key = {step.step_key: step for step in steps}  # the last report of a step wins, as on PostgreSQL
        payload = json.dumps(
            [
                {
                    "step_key": step.step_key,
                    "map_key": step.map_key,
                    "item_index": step.item_index,
                    "status": step.status.value,
                    "output": None if step.output is None else dumps(step.output),
                    "error": step.error,
                }
                for step in by_key.values()
            ]
        )
        written = connection.execute(
            self._q("record_steps"), {"run_id": run_id, "attempt": attempt, "steps": payload, "now": now}
        ).fetchall()
        events, freed_any = [], False
        for row in written:
            status = StepStatus(row["status"])
            step = by_key[row["step_key"]]
            if status.finished:
                freed = dict(
                    connection.execute(
                        self._q("record_steps_release"),
                        {"holder": holder_key(run_id, step.step_key), "attempt": attempt},
                    ).fetchall()
                )
                freed_any |= bool(freed)
                pools = history.only_pools(freed)
                if pools:
                    released = history.slots_released(attempt, pools, history.step_ended(status))
                    events.append(event_row(run_id, released, now, step.step_key))
            own = history.step_event(attempt, step)
            if own is not None:
                events.append(event_row(run_id, own, now, step.step_key))
        connection.executemany(self._q("insert_event"), events)
        return freed_any

    def next_map_item(self, fence: Fence, worker_id: str, map_key: str, window: int) -> StepRecord | None:
        run_id, attempt = fence
        scope = fanout_scope(run_id, map_key)
        with self._write() as (connection, now):
            run = connection.execute(self._q("step_fence"), {"run_id": run_id, "attempt": attempt}).fetchone()
            if run is None:
                return None
            if not has_room(connection.execute(self._q("next_map_item_used"), {"scope": scope}).fetchone()[0], window):
                return None
            row = connection.execute(
                self._q("next_map_item"), {"run_id": run_id, "map_key": map_key, "attempt": attempt}
            ).fetchone()
            if row is None:
                return None
            connection.execute(
                self._q("next_map_item_hold"),
                {
                    "scope": scope,
                    "holder": holder_key(run_id, row["step_key"]),
                    "run_id": run_id,
                    "attempt": attempt,
                    "worker": worker_id,
                    "now": now,
                    "expires": run[0],
                },
            )
        return records.step_record(row, to_time, to_json)

    # --- sweep ----------------------------------------------------------------------

    def sweep_step_holders(self, connection: sqlite3.Connection, now: float) -> tuple[int, list[dict[str, Any]]]:
        """Free every holder of each step with an expired lease; (holders freed, events)."""
        rows = connection.execute(self._q("sweep_step_holders"), {"now": now}).fetchall()
        if not rows:
            return 0, []
        by_holder: dict[tuple[str, str, int], dict[str, int]] = {}
        for row in rows:
            by_holder.setdefault((row["holder"], row["run_id"], row["attempt"]), {})[row["scope"]] = row["slots"]
        connection.execute(
            self._q("sweep_step_holders_delete"), {"holders": json.dumps(sorted({row["holder"] for row in rows}))}
        )
        events = [
            event_row(
                run_id, history.slots_released(attempt, pools, history.LEASE_EXPIRED), now, holder.partition("/")[2]
            )
            for (holder, run_id, attempt), freed in by_holder.items()
            if (pools := history.only_pools(freed))
        ]
        return len(rows), events
