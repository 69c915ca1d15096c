"""PostgreSQL verbs of step-level gates: pools, step slots and step checkpoints.

A mixin of `PostgresStore`, kept apart so each module stays small. Every
verb is one pipelined transaction. A claim share-locks its run row (the
fence: no takeover commits meanwhile), then locks the `tidegate_scopes` rows
of the scopes it asks for in key order, and only then reads limits and sums
holders: claimers of a scope queue up there instead of both seeing its last
free slot, and the common order rules out deadlocks between them. Times are
the server's (`statement_timestamp()` once locks are held, `now()` elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tidegate.domain.jsonvalue import dumps
from tidegate.domain.model import HolderRecord
from tidegate.domain.pools import UNCONFIGURED_LEASE_SECONDS, fanout_scope, holder_key, pool_of
from tidegate.domain.steps import PoolConfig, PoolStatus, SlotGrant, StepRecord, StepUpdate
from tidegate.storage import records, slots
from tidegate.storage.port import Fence
from tidegate.storage.postgres.pipeline import transaction

LEASE_EXPIRED = "lease expired"
READ_COMMITTED = b"BEGIN ISOLATION LEVEL READ COMMITTED"  # each read after a lock sees every commit before it


def _to_time(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def _to_json(value: Any) -> Any:
    return value


class PostgresStepVerbs:
    """The step verbs of the storage port; the host class provides these."""

    _connection: Callable[[], AbstractContextManager[psycopg.Connection[Any]]]
    _q: Callable[[str], str]
    _fetch_dicts: Callable[[str, Mapping[str, Any]], list[dict[str, Any]]]

    # --- pools ----------------------------------------------------------------------

    def set_pool_limit(self, pool: str, limit: int, lease_seconds: float) -> PoolConfig:
        with self._connection() as connection:
            with transaction(connection, READ_COMMITTED):
                self._lock_scopes(connection, [f"pool:{pool}"])
                saved = connection.execute(
                    self._q("set_pool_limit"), {"name": pool, "limit": limit, "lease": lease_seconds}
                )
            name, stored, lease, at, _ = saved.fetchone()  # type: ignore[misc]
        return PoolConfig(name, stored, lease, _to_time(at))  # type: ignore[arg-type]

    def pools(self) -> list[PoolStatus]:
        with self._connection() as connection:
            rows = connection.execute(self._q("pools")).fetchall()
        return [PoolStatus(name, limit, lease, claimed, pending) for name, limit, lease, claimed, pending in rows]

    def pool_holders(self, pool: str) -> list[HolderRecord]:
        return [records.holder_record(row, _to_time) for row in self._fetch_dicts("pool_holders", {"pool": pool})]

    def _lock_scopes(self, connection: psycopg.Connection[Any], keys: Sequence[str]) -> None:
        """Create (on first use) and lock the scope rows, in key order."""
        connection.execute(self._q("upsert_scopes"), {"keys": list(keys)})
        connection.execute(self._q("lock_scopes"), {"keys": list(keys)})

    # --- slots ----------------------------------------------------------------------

    def acquire_slots(
        self,
        fence: Fence,
        worker_id: str,
        step_key: str,
        needs: Mapping[str, int],
        fixed_limits: Mapping[str, int],
    ) -> SlotGrant:
        """Two round trips: fence, scope locks and reads; then the decision's writes with the commit."""
        run_id, attempt = fence
        holder = holder_key(run_id, step_key)
        scopes = sorted(needs)
        ids = {"run_id": run_id, "attempt": attempt, "step_key": step_key}
        with self._connection() as connection, transaction(connection, READ_COMMITTED):
            run = connection.execute(self._q("step_fence"), ids)
            self._lock_scopes(connection, scopes)
            limits = connection.execute(
                self._q("acquire_slots_limits"), {"pools": [p for p in map(pool_of, scopes) if p is not None]}
            )
            usage = connection.execute(self._q("acquire_slots_usage"), {"scopes": scopes, "holder": holder})
            if run.fetchone() is None:
                return SlotGrant(False, fenced_out=True)  # only scope lock rows may be new: they hold nothing
            request = slots.Request(
                needs, {name: (limit, lease) for name, limit, lease in limits.fetchall()}, fixed_limits
            )
            used, held = {}, {}
            for scope, total, mine in usage.fetchall():
                used[scope], held[scope] = total, mine
            blocking = request.decide(used, held)
            if blocking:
                metadata = slots.waiting_metadata(attempt, needs, blocking)
                connection.execute(
                    self._q("acquire_slots_waiting"), {**ids, "needs": dumps(dict(needs)), "metadata": dumps(metadata)}
                )
                return SlotGrant(False, blocking, request.lease_seconds())
            if held == dict(needs):
                connection.execute(self._q("acquire_slots_granted"), ids)
            else:
                wanted = [
                    {"scope": scope, "slots": count, "lease": request.lease_of(scope)} for scope, count in needs.items()
                ]
                connection.execute(
                    self._q("acquire_slots"),
                    {
                        **ids,
                        "holder": holder,
                        "worker": worker_id,
                        "holders": dumps(wanted),
                        "claimed": dumps(slots.claimed_metadata(attempt, needs)),
                        "unconfigured": request.unconfigured(),
                        "note": slots.UNCONFIGURED_NOTE,
                    },
                )
        return SlotGrant(True, [], request.lease_seconds())

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
            return bool(connection.execute(self._q("renew_slots"), params).fetchone()[0])  # type: ignore[index]

    def release_slots(self, fence: Fence, step_key: str) -> None:
        run_id, attempt = fence
        params = {"run_id": run_id, "attempt": attempt, "step_key": step_key, "holder": holder_key(run_id, step_key)}
        with self._connection() as connection:
            connection.execute(self._q("release_slots"), params)

    # --- steps ----------------------------------------------------------------------

    def record_step(self, fence: Fence, step: StepUpdate) -> bool:
        return self.record_steps(fence, [step])

    def record_steps(self, fence: Fence, steps: Sequence[StepUpdate]) -> bool:
        run_id, attempt = fence
        latest = {step.step_key: step for step in steps}  # an upsert may touch a row only once
        payload = [
            {
                "n": index,
                "step_key": step.step_key,
                "map_key": step.map_key,
                "item_index": step.item_index,
                "status": step.status.value,
                "output": step.output,
                "error": step.error,
                "event": slots.STEP_EVENTS.get(step.status),
                "metadata": slots.step_metadata(attempt, step),
            }
            for index, step in enumerate(latest.values())
        ]
        with self._connection() as connection:
            row = connection.execute(
                self._q("record_steps"), {"run_id": run_id, "attempt": attempt, "steps": dumps(payload)}
            ).fetchone()
        return bool(row[0])  # type: ignore[index]

    def run_steps(self, run_id: str) -> list[StepRecord]:
        return [
            records.step_record(row, _to_time, _to_json) for row in self._fetch_dicts("run_steps", {"run_id": run_id})
        ]

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
        return None if row is None else records.step_record(row, _to_time, _to_json)

    # --- sweep ----------------------------------------------------------------------

    def _sweep_step_holders(self, connection: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
        """Queue the sweep of step holders whose lease expired; its row counts the holders freed."""
        return connection.execute(self._q("sweep_step_holders"), {"reason": LEASE_EXPIRED})
