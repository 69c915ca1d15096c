"""PostgreSQL rules and limits: declared limits, overrides, the rules cache and scope reads.

Every claim checks the rules version (`load_rules` with the cached version
returns only the version when nothing moved), so the rules are read whole
only after a change; changes wait on the rules fence for claims in flight.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg

from tidegate.domain.adaptive import by_target
from tidegate.domain.errors import StoreUnavailable
from tidegate.domain.jsonvalue import dumps
from tidegate.domain.limits import QueueConfig, RunQueueConfig, queue_to_dict, run_queue_to_dict
from tidegate.domain.model import LimitChange
from tidegate.domain.rates import RateStates
from tidegate.domain.scopes import Rules
from tidegate.storage import port
from tidegate.storage.postgres.database import Aggregate, Database
from tidegate.storage.postgres.payloads import event_params, payload_json
from tidegate.storage.postgres.pipeline import transaction
from tidegate.storage.shared import adaptation, wakes
from tidegate.storage.shared.claiming import STATE_SLACK_NS
from tidegate.storage.shared.reads import LimitReads
from tidegate.storage.shared.rules import limit_change, stored_rules


class Limits(Aggregate, LimitReads, port.LimitVerbs):
    """The rules and limit verbs, and the cache of the rules every claim uses."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.cached: tuple[str, Rules] | None = None  # (rules_version, rules)

    def register_limits(
        self, run_queue: RunQueueConfig | None, queues: Sequence[QueueConfig], implied_queues: Sequence[str]
    ) -> None:
        params = {
            "run_queue": None if run_queue is None else dumps(run_queue_to_dict(run_queue)),
            "queues": payload_json([{"name": queue.name, "config": queue_to_dict(queue)} for queue in queues]),
            "implied": payload_json(
                [{"name": name, "config": queue_to_dict(QueueConfig(name))} for name in implied_queues]
            ),
        }
        with self._connection() as connection, transaction(connection):
            connection.execute(self._q("rules_fence"))  # waits for claims in flight; the next ones see the change
            connection.execute(self._q("register_limits"), params)
            wakes.sent_in_statement()  # when it bumped the rules version

    def rules(self) -> Rules:
        rules = self.rules_from_row(self._fetchone("load_rules", {"known": self._known_rules_version()}))
        if rules is None:
            rules = self.rules_from_row(self._fetchone("load_rules", {"known": None}))
        # a load_rules row read with known=None carries the whole rules: never None
        return rules  # type: ignore[return-value]

    def set_limit(self, target: str, limit: int | None) -> LimitChange:
        return self._change_limit(target, limit, reset=False)

    def reset_limit(self, target: str) -> LimitChange:
        return self._change_limit(target, None, reset=True)

    def _change_limit(self, target: str, limit: int | None, *, reset: bool) -> LimitChange:
        """Change an override under the rules fence: no claim is in flight meanwhile, so
        `before` is what every claim used until now and `after` what every later one uses."""
        with self._connection() as connection, transaction(connection):
            connection.execute(self._q("rules_fence"))
            before_row = connection.execute(self._q("load_rules"), {"known": None})
            if reset:
                changed = connection.execute(self._q("reset_override"), {"target": target})
            else:
                changed = connection.execute(self._q("set_override"), {"target": target, "limit": limit})
            connection.execute(self._q("bump_rules_version"))
            after_row = connection.execute(self._q("load_rules"), {"known": None})
            before = self.parse_rules(before_row.fetchone())
            row = changed.fetchone()
            # set_override is an upsert that returns its row: only a reset can find none
            version = (0 if row is None else row[1]) if reset else row[0]  # type: ignore[index]
            after = self.parse_rules(after_row.fetchone())
            change, event = limit_change(before, after, target, version, reset=reset)
            connection.execute(self._q("insert_event"), event_params(None, event))
        return change

    def parse_rules(self, row: Sequence[Any] | None) -> Rules:
        rules = self.rules_from_row(row)  # a complete row (known=None): never None
        assert rules is not None
        return rules

    def rules_from_row(self, row: Sequence[Any] | None) -> Rules | None:
        """The rules a `load_rules` row describes: the cached ones when it says they did not
        move; None when it carries only a version that is no longer the cached one."""
        if row is None:
            raise StoreUnavailable("the rules version is missing: run 'tidegate db migrate'")
        version, run_queue, queues, overrides, paused, adaptive = row
        cached = self.cached
        if queues is None:
            return cached[1] if cached is not None and cached[0] == version else None
        overrides = [(target, limit) for target, limit in overrides]
        rules = stored_rules(None if not run_queue else json.loads(run_queue), queues, overrides, paused, adaptive)
        self.cached = (version, rules)
        return rules

    def adapts(self) -> bool:
        """Whether the rules as last read (every claim refreshes them) have an adaptive queue: only then
        does a cycle read back its outcomes before it claims (`adapt`)."""
        cached = self.cached
        return cached is not None and adaptation.has_adaptive(cached[1])

    def adapt(self, connection: psycopg.Connection[Any], ended: Sequence[adaptation.Ended]) -> None:
        """Apply the outcomes' signals to the adaptive limits they concern (storage/shared/adaptation.py), in
        the cycle's transaction: the states locked in target order; a moved limit written under the
        rules fence (no claim in flight decides on the old one after this commits), with a new rules
        version and its LimitChanged event."""
        known = self._known_rules_version()
        rules = self.rules_from_row(connection.execute(self._q("load_rules"), {"known": known}).fetchone())
        if rules is None:
            rules = self.parse_rules(connection.execute(self._q("load_rules"), {"known": None}).fetchone())
        work = adaptation.targets(rules, ended)
        if not work:
            return
        seeds = [{"target": target, "limit": item.ceiling} for target, item in sorted(work.items())]
        connection.execute(self._q("adaptive_states_seed"), {"seeds": payload_json(seeds)})
        states = connection.execute(self._q("adaptive_states"), {"targets": sorted(work)})
        usage = dict(connection.execute(self._q("adaptive_states_usage"), {"targets": sorted(work)}).fetchall())
        rows = states.fetchall()
        now = rows[0][0]
        stored = by_target([tuple(row[1:]) for row in rows if row[1] is not None])
        result = adaptation.adapted(work, stored, usage, now)
        if result.changed:
            connection.execute(self._q("rules_fence"))
        connection.execute(
            self._q("save_adaptive_states"), {"states": payload_json(adaptation.state_rows(result.states))}
        )
        if result.changed:
            connection.execute(self._q("bump_rules_version"))
            for event in result.events:
                connection.execute(self._q("insert_event"), event_params(None, event))

    def _known_rules_version(self) -> str | None:
        cached = self.cached
        return None if cached is None else cached[0]

    def rate_states(self) -> RateStates:
        with self._connection() as connection:
            return self.live_rates(connection)

    def live_rates(self, connection: psycopg.Connection[Any]) -> RateStates:
        """The rate states that may hold a start back, with the database's time, read on
        `connection` (a caller's transaction, or a pooled one)."""
        rows = connection.execute(self._q("live_rate_states"), {"slack": STATE_SLACK_NS}).fetchall()
        states = {(scope, window): tat for _, scope, window, tat in rows if scope is not None}
        return RateStates(states, rows[0][0])
