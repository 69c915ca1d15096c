"""The fleet-wide gauges of `/metrics`, read from the store at scrape time.

A custom collector rather than gauges kept up to date: the store is the one
source of truth for what every worker of the fleet holds, so each scrape asks
it (runs per queue and status, the slots in use per scope as the sum of the
holder rows against the limit in force, queued runs blocked per scope as
`queue why` would say, pools' pending steps, and per rate window, of a queue's, a tag's or a named
rate, the cost its stored state counts now against its limit, from the rows
`limits list` shows). Nothing is cached, so nothing drifts from the holder rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tidegate.bootstrap import Store
from tidegate.domain.durations import format_duration
from tidegate.domain.live_rates import split_rate_target
from tidegate.domain.scopes import GLOBAL, Rules, effective_limit, queue_scope
from tidegate.engine.operators import limits, queues
from tidegate.engine.operators.limit_table import limit_table
from tidegate.engine.operators.pool_config import list_pools
from tidegate.engine.operators.runs import run_counts


class FleetCollector(Collector):
    """Collects the store's view of the whole fleet, on every scrape (in the scrape's thread)."""

    def __init__(self, store: Callable[[], Store]) -> None:
        self._store = store  # the app's, opened on first use (not when the API is built)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        store = self._store()
        runs = GaugeMetricFamily("tidegate_runs", "Runs in the store, by queue and status.", labels=["queue", "status"])
        for (queue, status), count in sorted(run_counts(store).items()):
            runs.add_metric([queue, status.value], count)
        yield runs
        yield from self._scopes(store)
        yield from self._rates(store)
        blocked = GaugeMetricFamily(
            "tidegate_scope_blocked_runs",
            "Queued runs this scope holds back now: full, or its queue paused (a run counts for each).",
            labels=["scope"],
        )
        for scope, count in sorted(queues.blocked(store).per_scope.items()):
            blocked.add_metric([scope], count)
        yield blocked

    def _scopes(self, store: Store) -> Iterator[GaugeMetricFamily]:
        used = GaugeMetricFamily(
            "tidegate_scope_slots_used", "Slots in use per scope: the sum of its live holder rows.", labels=["scope"]
        )
        limit = GaugeMetricFamily(
            "tidegate_scope_slots_limit",
            "The limit in force per limited scope (code and live overrides).",
            labels=["scope"],
        )
        pending = GaugeMetricFamily(
            "tidegate_pool_pending_steps", "Steps of live attempts waiting for slots of a pool.", labels=["pool"]
        )
        rules = limits.rules(store)
        usage = limits.scope_usage(store)
        for scope in sorted(set(usage) | _declared_scopes(rules)):
            used.add_metric([scope], usage.get(scope, 0))
            in_force = effective_limit(rules, scope)
            if in_force is not None:
                limit.add_metric([scope], in_force)
        for pool in list_pools(store):
            scope = f"pool:{pool.name}"
            used.add_metric([scope], pool.claimed)
            if pool.limit is not None:
                limit.add_metric([scope], pool.limit)
            pending.add_metric([pool.name], pool.pending)
        yield used
        yield limit
        yield pending
        if rules.adaptive:
            yield _adaptive(rules)

    def _rates(self, store: Store) -> Iterator[GaugeMetricFamily]:
        """Per rate scope and window: the cost its stored state counts now, and its limit."""
        used = GaugeMetricFamily(
            "tidegate_rate_tokens_used",
            "Cost units (starts) a rate window counts now, from its stored state at the database's time.",
            labels=["scope", "per"],
        )
        limit = GaugeMetricFamily(
            "tidegate_rate_tokens_limit", "The most cost units a rate window allows.", labels=["scope", "per"]
        )
        for row in limit_table(store).limits:  # the rows `limits list` shows: named rates' too, the same way
            if row.per is None or row.used is None or row.limit is None:
                continue  # not a rate window, or a family whose members count on their own rows
            scope, per = split_rate_target(row.target)[0], format_duration(row.per)
            used.add_metric([scope, per], row.used)
            limit.add_metric([scope, per], row.limit)
        yield used
        yield limit


def _adaptive(rules: Rules) -> GaugeMetricFamily:
    """The stored effective limit of each adaptive target, with why it last moved (domain/adaptive.py)."""
    family = GaugeMetricFamily(
        "tidegate_scope_adaptive_limit",
        "An adaptive queue's (or partition's) effective limit, and why it last moved: overloaded or recovered.",
        labels=["scope", "reason"],
    )
    for scope, state in sorted(rules.adaptive.items()):
        family.add_metric([scope, state.reason or ""], state.limit)
    return family


def _declared_scopes(rules: Rules) -> set[str]:
    """Limited scopes shown even while nothing holds them: the global cap and each whole queue's limit."""
    scopes = {GLOBAL} if rules.global_limit() is not None else set()
    for name, config in rules.queues.items():
        if not config.concurrency.partition.enabled and rules.queue_limit(name, "") is not None:
            scopes.add(queue_scope(name, ""))
    return scopes
