"""SQLite verbs of step-level gates: pools, step slots and step checkpoints.

A mixin of `SQLiteStore`, kept apart so each module stays small. Every verb
is one `BEGIN IMMEDIATE` transaction, and SQLite's single writer is what
makes check-and-insert of slots atomic against every other claimer: the
usage read cannot change before the holder rows are written.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any

from tidegate.domain.jsonvalue import dumps
from tidegate.domain.model import HolderRecord
from tidegate.domain.pools import UNCONFIGURED_LEASE_SECONDS, fanout_scope, holder_key
from tidegate.domain.steps import PoolConfig, PoolStatus, SlotGrant, StepRecord, StepStatus, StepUpdate
from tidegate.storage import records, slots
from tidegate.storage.port import Fence
from tidegate.storage.sqlite.wakeups import DatagramNotifier

LEASE_EXPIRED = "lease expired"


def _to_time(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def _to_json(value: str | None) -> Any:
    return None if value is None else json.loads(value)


def _event(run_id: str | None, key: str | None, type_: str, metadata: dict[str, Any], now: float) -> dict[str, Any]:
    return {"run_id": run_id, "step_key": key, "type": type_, "metadata": dumps(metadata), "now": now}


class SQLiteStepVerbs:
    """The step verbs of the storage port; the host class provides these four."""

    _notifier: DatagramNotifier
    _write: Callable[[], AbstractContextManager[tuple[sqlite3.Connection, float]]]
    _connection: Callable[[], sqlite3.Connection]
    _q: Callable[[str], str]

    # --- pools ----------------------------------------------------------------------

    def set_pool_limit(self, pool: str, limit: int, lease_seconds: float) -> PoolConfig:
        with self._write() as (connection, now):
            before = connection.execute(self._q("set_pool_limit_before"), {"name": pool}).fetchone()
            connection.execute(
                self._q("set_pool_limit"), {"name": pool, "limit": limit, "lease": lease_seconds, "now": now}
            )
            metadata = {
                "target": f"pool:{pool}",
                "old": None if before is None else before[0],
                "new": limit,
                "lease_seconds": lease_seconds,
            }
            connection.execute(self._q("insert_step_event"), _event(None, None, "LimitChanged", metadata, now))
        self._notifier.notify()  # a raised limit lets waiting steps in
        return PoolConfig(pool, limit, lease_seconds, _to_time(now))  # type: ignore[arg-type]

    def pools(self) -> list[PoolStatus]:
        return [
            PoolStatus(name, limit, lease, claimed, pending)
            for name, limit, lease, claimed, pending in self._connection().execute(self._q("pools"))
        ]

    def pool_holders(self, pool: str) -> list[HolderRecord]:
        rows = self._connection().execute(self._q("pool_holders"), {"pool": pool})
        return [records.holder_record(row, _to_time) for row in rows]  # type: ignore[arg-type]

    # --- slots ----------------------------------------------------------------------

    def acquire_slots(
        self,
        fence: Fence,
        worker_id: str,
        step_key: str,
        needs: Mapping[str, int],
        fixed_limits: Mapping[str, int],
    ) -> SlotGrant:
        run_id, attempt = fence
        holder = holder_key(run_id, step_key)
        scopes = json.dumps(sorted(needs))
        with self._write() as (connection, now):
            run = connection.execute(self._q("step_fence"), {"run_id": run_id, "attempt": attempt}).fetchone()
            if run is None:
                return SlotGrant(False, fenced_out=True)
            pools = {
                row[0]: (row[1], row[2])
                for row in connection.execute(self._q("acquire_slots_limits"), {"scopes": scopes})
            }
            request = slots.Request(needs, pools, fixed_limits)
            used, held = {}, {}
            for scope, total, mine in connection.execute(
                self._q("acquire_slots_usage"), {"scopes": scopes, "holder": holder}
            ):
                used[scope], held[scope] = total, mine
            blocking = request.decide(used, held)
            if blocking:
                first = connection.execute(
                    self._q("acquire_slots_waiting"),
                    {"run_id": run_id, "step_key": step_key, "needs": dumps(dict(needs)), "attempt": attempt},
                ).fetchone()
                if first is not None:
                    metadata = slots.waiting_metadata(attempt, needs, blocking)
                    connection.execute(
                        self._q("insert_step_event"), _event(run_id, step_key, "StepSlotWaiting", metadata, now)
                    )
                return SlotGrant(False, blocking, request.lease_seconds())
            if held != dict(needs):
                self._hold(connection, run_id, attempt, worker_id, holder, request, run[0], now)
                events = [_event(run_id, step_key, "StepSlotClaimed", slots.claimed_metadata(attempt, needs), now)]
                for pool in request.unconfigured():
                    seen = connection.execute(
                        self._q("acquire_slots_unconfigured_seen"), {"run_id": run_id, "pool": pool}
                    )
                    if seen.fetchone() is None:
                        events.append(
                            _event(run_id, step_key, "PoolUnconfigured", slots.unconfigured_metadata(pool), now)
                        )
                connection.executemany(self._q("insert_step_event"), events)
            connection.execute(self._q("acquire_slots_granted"), {"run_id": run_id, "step_key": step_key})
        return SlotGrant(True, [], request.lease_seconds())

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
                metadata = {"attempt": attempt, "pools": sorted(slots.display(scope) for scope in renewed)}
                connection.execute(
                    self._q("insert_step_event"), _event(run_id, step_key, "StepSlotRenewed", metadata, now)
                )
        return bool(renewed)

    def release_slots(self, fence: Fence, step_key: str) -> None:
        run_id, attempt = fence
        with self._write() as (connection, now):
            if connection.execute(self._q("step_fence"), {"run_id": run_id, "attempt": attempt}).fetchone() is None:
                return
            freed = dict(
                connection.execute(
                    self._q("release_slots"), {"holder": holder_key(run_id, step_key), "attempt": attempt}
                ).fetchall()
            )
            if freed:
                metadata = slots.released_metadata(attempt, freed, "released")
                connection.execute(
                    self._q("insert_step_event"), _event(run_id, step_key, "StepSlotReleased", metadata, now)
                )
        if freed:
            self._notifier.notify()

    # --- steps ----------------------------------------------------------------------

    def record_step(self, fence: Fence, step: StepUpdate) -> bool:
        return self.record_steps(fence, [step])

    def record_steps(self, fence: Fence, steps: Sequence[StepUpdate]) -> bool:
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
        freed_any = False
        with self._write() as (connection, now):
            if connection.execute(self._q("step_fence"), {"run_id": run_id, "attempt": attempt}).fetchone() is None:
                return False
            written = connection.execute(
                self._q("record_steps"), {"run_id": run_id, "attempt": attempt, "steps": payload, "now": now}
            ).fetchall()
            events = []
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
                    pools = slots.only_pools(freed)
                    if pools:
                        metadata = slots.released_metadata(attempt, pools, f"step {status.value}")
                        events.append(_event(run_id, step.step_key, "StepSlotReleased", metadata, now))
                if status in slots.STEP_EVENTS:
                    events.append(
                        _event(
                            run_id, step.step_key, slots.STEP_EVENTS[status], slots.step_metadata(attempt, step), now
                        )
                    )
            connection.executemany(self._q("insert_step_event"), events)
        if freed_any:
            self._notifier.notify()
        return True

    def run_steps(self, run_id: str) -> list[StepRecord]:
        rows = self._connection().execute(self._q("run_steps"), {"run_id": run_id})
        return [records.step_record(row, _to_time, _to_json) for row in rows]

    def next_map_item(self, fence: Fence, worker_id: str, map_key: str, window: int) -> StepRecord | None:
        run_id, attempt = fence
        scope = fanout_scope(run_id, map_key)
        with self._write() as (connection, now):
            run = connection.execute(self._q("step_fence"), {"run_id": run_id, "attempt": attempt}).fetchone()
            if run is None:
                return None
            if connection.execute(self._q("next_map_item_used"), {"scope": scope}).fetchone()[0] >= window:
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
        return records.step_record(row, _to_time, _to_json)

    # --- sweep ----------------------------------------------------------------------

    def _sweep_step_holders(self, connection: sqlite3.Connection, now: float) -> tuple[int, list[dict[str, Any]]]:
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
            _event(
                run_id,
                holder.partition("/")[2],
                "StepSlotReleased",
                slots.released_metadata(attempt, pools, LEASE_EXPIRED),
                now,
            )
            for (holder, run_id, attempt), freed in by_holder.items()
            if (pools := slots.only_pools(freed))
        ]
        return len(rows), events
