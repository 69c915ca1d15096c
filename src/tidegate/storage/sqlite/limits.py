"""SQLite rules and limits: declared limits, overrides, the rules cache and scope reads.

The rules are re-read only when their version moved (`load_rules`), so a
claim costs one small read for them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from tidegate.domain.adaptive import by_target
from tidegate.domain.events import Event
from tidegate.domain.jsonvalue import dumps
from tidegate.domain.limits import QueueConfig, RunQueueConfig, queue_to_dict, run_queue_to_dict
from tidegate.domain.model import LimitChange
from tidegate.domain.rates import RateStates, to_ns
from tidegate.domain.scopes import Rules
from tidegate.storage import port
from tidegate.storage.shared import adaptation, wakes
from tidegate.storage.shared.claiming import STATE_SLACK_NS
from tidegate.storage.shared.reads import LimitReads
from tidegate.storage.shared.rules import limit_change, stored_rules
from tidegate.storage.sqlite.database import Aggregate, Database
from tidegate.storage.sqlite.payloads import event_row


class Limits(Aggregate, LimitReads, port.LimitVerbs):
    """The rules and limit verbs, and the cache of the rules every claim uses."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self._rules_cache: tuple[str, Rules] | None = None

    def register_limits(
        self, run_queue: RunQueueConfig | None, queues: Sequence[QueueConfig], implied_queues: Sequence[str]
    ) -> None:
        with self._write() as (connection, now):
            changed = False
            if run_queue is not None:
                changed |= bool(
                    connection.execute(
                        self._q("register_limits"), {"value": dumps(run_queue_to_dict(run_queue)), "now": now}
                    ).fetchone()
                )
            for queue in queues:
                changed |= bool(
                    connection.execute(
                        self._q("register_limits_queue"),
                        {"name": queue.name, "config": dumps(queue_to_dict(queue)), "now": now},
                    ).fetchone()
                )
            for name in implied_queues:
                changed |= bool(
                    connection.execute(
                        self._q("register_limits_implied"),
                        {"name": name, "config": dumps(queue_to_dict(QueueConfig(name))), "now": now},
                    ).fetchone()
                )
            if changed:
                connection.execute(self._q("bump_rules_version"), {"now": now})
        wakes.only_if(changed)  # a raised limit may unblock runs

    def rules(self) -> Rules:
        return self.load_rules(self._connection())

    def set_limit(self, target: str, limit: int | None) -> LimitChange:
        return self._change_limit(target, limit, reset=False)

    def reset_limit(self, target: str) -> LimitChange:
        return self._change_limit(target, None, reset=True)

    def _change_limit(self, target: str, limit: int | None, *, reset: bool) -> LimitChange:
        with self._write() as (connection, now):
            before = self.load_rules(connection)
            if reset:
                row = connection.execute(self._q("reset_override"), {"target": target}).fetchone()
                version = 0 if row is None else row[1]
            else:
                version = connection.execute(
                    self._q("set_override"), {"target": target, "limit": limit, "now": now}
                ).fetchone()[0]
            connection.execute(self._q("bump_rules_version"), {"now": now})
            change, changed = limit_change(before, self.load_rules(connection), target, version, reset=reset)
            connection.execute(self._q("insert_event"), event_row(None, changed, now))
        return change

    def load_rules(self, connection: sqlite3.Connection) -> Rules:
        """The declared limits plus live overrides, re-read only when their version moved."""
        version = connection.execute(self._q("load_rules")).fetchone()[0]
        if self._rules_cache is not None and self._rules_cache[0] == version:
            return self._rules_cache[1]
        row = connection.execute(self._q("load_rules_run_queue")).fetchone()
        queues = [(json.loads(config), paused) for config, paused in connection.execute(self._q("load_rules_queues"))]
        rules = stored_rules(
            None if row is None else json.loads(row[0]),
            [config for config, _ in queues],
            [(target, limit) for target, limit, _, _ in connection.execute(self._q("load_overrides"))],
            [config["name"] for config, paused in queues if paused],
            connection.execute(self._q("load_rules_adaptive")).fetchall(),
        )
        self._rules_cache = (version, rules)
        return rules

    def adapts(self) -> bool:
        """Whether the rules as last read (every claim refreshes them) have an adaptive queue: only then
        does a cycle read its ended attempts' claim times and `adapt`."""
        cached = self._rules_cache
        return cached is not None and adaptation.has_adaptive(cached[1])

    def claimed_at(self, connection: sqlite3.Connection, run_ids: Sequence[str]) -> dict[str, float]:
        """When each of these running attempts was claimed, before the outcome frees its holders."""
        return dict(
            connection.execute(self._q("adaptive_states_claims"), {"ids": json.dumps(list(run_ids))}).fetchall()
        )

    def adapt(self, connection: sqlite3.Connection, ended: Sequence[adaptation.Ended], now: float) -> list[Event]:
        """Apply the outcomes' signals to the adaptive limits they concern (storage/shared/adaptation.py);
        the LimitChanged events of the limits that moved, for the caller to append."""
        rules = self.load_rules(connection)
        work = adaptation.targets(rules, ended)
        if not work:
            return []
        targets = {"targets": json.dumps(sorted(work))}
        rows = connection.execute(self._q("adaptive_states"), targets).fetchall()
        usage = dict(connection.execute(self._q("adaptive_states_usage"), targets).fetchall())
        result = adaptation.adapted(work, by_target([tuple(row) for row in rows]), usage, now)
        connection.execute(
            self._q("save_adaptive_states"), {"states": json.dumps(adaptation.state_rows(result.states))}
        )
        if result.changed:
            connection.execute(self._q("bump_rules_version"), {"now": now})
        return result.events

    def rate_states(self) -> RateStates:
        return self.live_rates(self._connection(), self._db.clock.wall())

    def live_rates(self, connection: sqlite3.Connection, now: float) -> RateStates:
        """The rate states that may hold a start back at `now`, read on `connection` (a caller's
        transaction, or the reader's)."""
        rows = connection.execute(self._q("live_rate_states"), {"after": to_ns(now) - STATE_SLACK_NS})
        return RateStates({(scope, window): tat for scope, window, tat in rows}, now)
