"""Scopes: every run-level limit as a key and a limit.

A run needs one slot of each of its scopes: `global` (the cap on running
runs), its queue's scope (`queue:api`, or `queue:api/customer_id=3` for a
partitioned queue or an explicit concurrency key) and one per tag limit it
falls under (`tag:env=prod`, `tag:tenant=acme`). The store counts slots in use
from holder rows; this module only decides which scopes a run needs and
their limits, including live overrides set by operators.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from tidegate.domain.adaptive import AdaptiveState
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.limits import QueueConfig, RunQueueConfig, check_limit, check_partition_form
from tidegate.domain.live_rates import in_force, pick_window, rate_target, split_rate_target
from tidegate.domain.names import CONTROL, text_problem
from tidegate.domain.rates import Rate, window_key

GLOBAL = "global"


def partition_of(queue: QueueConfig | None, task: str, args: Mapping[str, Any], concurrency_key: str | None) -> str:
    """The partition a run falls in ('' when its queue is not partitioned).

    An explicit concurrency key wins: one lane per key, each with the queue's
    limit. Otherwise the queue's Partition decides: task kind and/or the named
    args (JSON keys; a missing key is the empty value; `by_args=[]` = all args).
    """
    if concurrency_key is not None:
        return f"key={concurrency_key}"
    if queue is None or not queue.concurrency.partition.enabled:
        return ""
    partition = queue.concurrency.partition
    parts = []
    if partition.by_kind:
        parts.append(f"kind={task}")
    if partition.by_args is not None:
        keys = partition.by_args or tuple(sorted(args))
        parts.extend(f"{key}={_arg_text(args.get(key))}" for key in keys)
    return ",".join(parts)


def _arg_text(value: Any) -> str:
    """An arg's part of a partition key: text as it is, anything else (and text with a control
    character, which the key must never carry to a terminal) as escaped JSON."""
    if value is None:
        return ""
    if isinstance(value, str) and not CONTROL.search(value):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def queue_scope(queue: str, partition: str) -> str:
    return f"queue:{queue}/{partition}" if partition else f"queue:{queue}"


def rate_partition_of(queue: QueueConfig | None, task: str, args: Mapping[str, Any]) -> str:
    """The partition of a queue's rate a run is charged to ('' when the rate is one budget).

    Read like a concurrency partition (kind first, then the named args), from
    the queue's `rate_partition`; a concurrency key does not split a rate.
    """
    if queue is None or not queue.rate or not queue.rate_partition.enabled:
        return ""
    partition = queue.rate_partition
    parts = [f"kind={task}"] if partition.by_kind else []
    if partition.by_args is not None:
        keys = partition.by_args or tuple(sorted(args))
        parts.extend(f"{key}={_arg_text(args.get(key))}" for key in keys)
    return ",".join(parts)


def rate_scope(queue: str, partition: str) -> str:
    """A queue's rate scope: `rate:NAME`, or `rate:NAME/PARTITION` for one budget per partition."""
    return f"rate:{queue}/{partition}" if partition else f"rate:{queue}"


TAG_RATE_PREFIX = "rate:tag:"


def tag_rate_scope(key: str, value: str) -> str:
    """A tag rate's scope: `rate:tag:KEY=VALUE`, one budget per tag value, shared by every queue."""
    return f"{TAG_RATE_PREFIX}{key}={value}"


@dataclass(frozen=True)
class ScopeNeed:
    key: str
    limit: int


@dataclass(frozen=True)
class Rules:
    """Every run-level limit in force: the code's declarations plus live overrides.

    `overrides` maps a target to a limit (None = unlimited): `global`,
    `queue:NAME` (the queue's limit for every partition), `queue:NAME/PARTITION`,
    `tag:KEY=VALUE`, or `tag:KEY` (every value of a per-unique-value tag limit).
    `paused`: queues an operator paused: their runs stay queued, none is admitted.
    `adaptive`: the stored effective limits of adaptive queues and partitions, by target
    (`queue:NAME` or `queue:NAME/PARTITION`; domain/adaptive.py), and of adaptive rate windows
    (`rate:NAME[/PARTITION]@PER`). A rate window's target in `overrides` (`domain.live_rates`)
    sets its limit; `rate_windows` and `rate_scopes` give the windows in force.
    """

    run_queue: RunQueueConfig = field(default_factory=RunQueueConfig)
    queues: Mapping[str, QueueConfig] = field(default_factory=dict)
    overrides: Mapping[str, int | None] = field(default_factory=dict)
    paused: frozenset[str] = frozenset()
    adaptive: Mapping[str, AdaptiveState] = field(default_factory=dict)

    @cached_property
    def charge_windows(self) -> dict[Any, Any]:
        """The rate windows each run shape (queue, rate partition, tags) is charged under these rules,
        filled by the claims' rate charger (`domain.rate_charger.RateCharger.windows`) and kept for
        the rules' life: a thousand rate partitions are a thousand shapes, each worked out once
        rather than once a claim."""
        return {}

    @cached_property
    def live_rates(self) -> tuple[Mapping[str, int | None], Mapping[str, AdaptiveState]]:
        """The overrides and adaptive states of rate windows alone (`rate:...@PER`): most rules have
        none, and then a claim's windows are the code's at no cost (`domain.live_rates.in_force`)."""
        return (
            {target: limit for target, limit in self.overrides.items() if target.startswith("rate:")},
            {target: state for target, state in self.adaptive.items() if target.startswith("rate:")},
        )

    def is_paused(self, queue: str) -> bool:
        return queue in self.paused

    def global_limit(self) -> int | None:
        if GLOBAL in self.overrides:
            return self.overrides[GLOBAL]
        return self.run_queue.max_concurrent_runs

    def queue_limit(self, queue: str, partition: str) -> int | None:
        """The shared (global) limit of one partition of a queue.

        Live overrides win over code: a partition's own live limit, else the
        queue's live limit (for every partition, tiers included: an operator
        lowering a queue in an incident means all of it), else the code's tier
        for the partition, else the code's global limit; an adaptive queue's
        stored effective limit (never above the code's, never below its `min`)
        replaces the code's.
        """
        exact = queue_scope(queue, partition)
        if partition and exact in self.overrides:
            return self.overrides[exact]
        if f"queue:{queue}" in self.overrides:
            return self.overrides[f"queue:{queue}"]
        config = self.queues.get(queue)
        if config is None:
            return None
        declared = self.declared_queue_limit(config, partition)
        if config.adaptive is None:
            return declared
        ceiling = config.adaptive.ceiling(declared, f"queue {queue}")
        state = self.adaptive.get(queue_scope(queue, partition))
        return ceiling if state is None else max(config.adaptive.min, min(state.limit, ceiling))

    @staticmethod
    def declared_queue_limit(config: QueueConfig, partition: str) -> int | None:
        """The code's limit of one partition of a queue: its tier, else the queue's global limit."""
        tiers = config.concurrency.overrides or {}
        if partition and partition in tiers:
            return tiers[partition]
        return config.concurrency.global_limit

    def rates(self, queue: str) -> tuple[Rate, ...]:
        """The windows of a queue's rate, each of which must allow a start (none: no rate)."""
        config = self.queues.get(queue)
        return () if config is None else tuple(config.rate)

    def tag_rates(self, key: str, value: str) -> tuple[Rate, ...]:
        """The windows of every tag rate a run tagged key=value is charged (none: no tag rate)."""
        return tuple(limit.rate for limit in self.run_queue.tag_rate_limits if limit.applies(key, value))

    @cached_property
    def charges_rates(self) -> bool:
        """Whether any rate is in force (a queue's or a tag's): without one no start is charged and
        no rate state need be read. Asked per claimed run, so answered once per `Rules`."""
        return bool(self.run_queue.tag_rate_limits) or any(config.rate for config in self.queues.values())

    @cached_property
    def adaptive_rate_span(self) -> int:
        """The longest window (ns) of an adaptive rate (0: none is adaptive).

        Whether a charge found its window in use depends on the state it found up to one
        emission interval (never more than the window) before its instant
        (`storage.shared.adaptation.in_use`): a claim that reads only the states that may
        refuse a start now must read back that far where a rate adapts."""
        windows = [rate for config in self.queues.values() for rate in config.rate]
        windows += [limit.rate for limit in self.run_queue.tag_rate_limits]
        return max((window_key(rate) for rate in windows if rate.adaptive is not None), default=0)

    def has_rates(self, queue: str) -> bool:
        """Whether a start of a run of `queue` may be charged some rate (its queue's, or a tag's)."""
        return bool(self.rates(queue) or self.run_queue.tag_rate_limits)

    def rate_scopes(
        self, queue: str, rate_partition: str, tags: Mapping[str, str]
    ) -> list[tuple[str, tuple[Rate, ...]]]:
        """Every rate a run's start is charged, as (scope, windows), in key order: its queue's
        (`rate_partition` of it) and one per tag rate its tags fall under. Every window of every
        one must allow the start, and the claim charges them all or none."""
        if not self.charges_rates:
            return []
        found: dict[str, tuple[Rate, ...]] = {}
        windows = self.rates(queue)
        if windows:
            scope = rate_scope(queue, rate_partition)
            found[scope] = in_force(scope, windows, *self.live_rates)
        if self.run_queue.tag_rate_limits:
            for key, value in tags.items():
                windows = self.tag_rates(key, value)
                if windows:
                    scope = tag_rate_scope(key, value)
                    found[scope] = in_force(scope, windows, *self.live_rates)
        return sorted(found.items())

    def rate_windows(self, scope: str) -> tuple[Rate, ...]:
        """The windows in force of a rate scope (`rate:QUEUE[/PARTITION]` or `rate:tag:KEY=VALUE`):
        the code's, each with its live override (`domain.live_rates`); none when no rate has that scope."""
        return in_force(scope, self.declared_rate_windows(scope), *self.live_rates)

    def declared_rate_windows(self, scope: str) -> tuple[Rate, ...]:
        """The code's windows of a rate scope, or of a family of them: `rate:QUEUE` and
        `rate:QUEUE/PARTITION` (its queue's rate), `rate:tag:KEY=VALUE` (every tag rate it falls
        under), `rate:tag:KEY` (the per-value tag rates of KEY)."""
        if scope.startswith(TAG_RATE_PREFIX):
            key, equals, value = scope[len(TAG_RATE_PREFIX) :].partition("=")
            if equals:
                return self.tag_rates(key, value)
            declared = self.run_queue.tag_rate_limits
            return tuple(limit.rate for limit in declared if limit.key == key and limit.per_unique_value)
        return self.rates(scope.removeprefix("rate:").partition("/")[0]) if scope.startswith("rate:") else ()

    def declared_rate_scopes(self) -> list[str]:
        """The rate scopes the rules name before any run is charged: each queue's one budget and
        each fixed-value tag rate (a partitioned or per-value rate's scopes come with its runs)."""
        scopes = {
            rate_scope(name, "")
            for name, config in self.queues.items()
            if config.rate and not config.rate_partition.enabled
        }
        scopes |= {
            tag_rate_scope(limit.key, limit.value)
            for limit in self.run_queue.tag_rate_limits
            if limit.value is not None
        }
        return sorted(scopes)

    def local_limit(self, queue: str) -> int | None:
        config = self.queues.get(queue)
        return None if config is None else config.concurrency.local_limit

    def max_active(self, queue: str) -> int | None:
        config = self.queues.get(queue)
        return None if config is None else config.max_active

    def max_workers(self, queue: str) -> int | None:
        config = self.queues.get(queue)
        return None if config is None else config.max_workers

    def tag_limit(self, key: str, value: str) -> int | None:
        """The tightest limit on runs tagged key=value: a live override of that value, else
        every declaration that applies (a fixed value, a per-value limit, a live `tag:KEY`)."""
        exact = f"tag:{key}={value}"
        if exact in self.overrides:
            return self.overrides[exact]
        applicable = []
        per_value = self.overrides.get(f"tag:{key}")
        declared_per_value = False
        for declared in self.run_queue.tag_concurrency_limits:
            if declared.key != key:
                continue
            if declared.per_unique_value:
                declared_per_value = True
                applicable.append(per_value if f"tag:{key}" in self.overrides else declared.limit)
            elif declared.value == value:
                applicable.append(declared.limit)
        if not declared_per_value and f"tag:{key}" in self.overrides:
            applicable.append(per_value)  # a live per-value limit with no declaration in code
        known = [limit for limit in applicable if limit is not None]
        if known:
            return min(known)
        return None

    def scopes_for(self, queue: str, partition: str, tags: Mapping[str, str]) -> list[ScopeNeed]:
        """The limited scopes a run needs one slot of each, in key order (the lock order)."""
        needs: dict[str, int] = {}
        cap = self.global_limit()
        if cap is not None:
            needs[GLOBAL] = cap
        queue_limit = self.queue_limit(queue, partition)
        if queue_limit is not None:
            needs[queue_scope(queue, partition)] = queue_limit
        for key, value in tags.items():
            limit = self.tag_limit(key, value)
            if limit is not None:
                needs[f"tag:{key}={value}"] = limit
        return [ScopeNeed(key, needs[key]) for key in sorted(needs)]


def check_override_target(target: str, rules: Rules) -> str:
    """Validate a live-limit target against the declared queues; return it normalised."""
    if target == GLOBAL:
        return target
    problem = text_problem(target, max_length=1000)
    if problem:
        raise ConfigurationError(f"limit target {target!r} is not valid: {problem}")
    kind, _, rest = target.partition(":")
    if kind == "queue" and rest:
        name, _, partition = rest.partition("/")
        config = rules.queues.get(name)
        if config is None:
            raise ConfigurationError(f"limit target {target!r}: no queue named {name!r} is declared")
        if partition and not partition.startswith("key="):
            check_partition_form(partition, config.concurrency.partition)
        return target
    if kind == "tag" and rest:
        key, equals, value = rest.partition("=")
        if not key or (equals and not value):
            raise ConfigurationError(f"limit target {target!r}: expected tag:KEY=VALUE or tag:KEY")
        return target
    if kind == "rate" and rest:
        return _check_rate_target(target, rules)
    raise ConfigurationError(
        f"limit target {target!r} is not valid: use global, queue:NAME, queue:NAME/PARTITION, tag:KEY=VALUE,"
        " tag:KEY, or a rate window: rate:QUEUE[/PARTITION]@PER, rate:tag:KEY[=VALUE]@PER"
    )


def _check_rate_target(target: str, rules: Rules) -> str:
    """A rate window's target (`domain.live_rates`), normalised: `rate:QUEUE@1m`."""
    scope, per = split_rate_target(target)
    if scope.startswith(TAG_RATE_PREFIX):
        key, equals, value = scope[len(TAG_RATE_PREFIX) :].partition("=")
        if not key or (equals and not value):
            raise ConfigurationError(f"limit target {target!r}: expected rate:tag:KEY=VALUE@PER or rate:tag:KEY@PER")
        if not rules.declared_rate_windows(scope):
            what = f"tag {key}={value}" if equals else f"every value of tag {key} (per_unique_value)"
            raise ConfigurationError(f"limit target {target!r}: no tag rate is declared for {what}")
    else:
        name, _, partition = scope.removeprefix("rate:").partition("/")
        config = rules.queues.get(name)
        if config is None or not config.rate:
            raise ConfigurationError(f"limit target {target!r}: no queue named {name!r} declares a rate")
        if partition:
            if not config.rate_partition.enabled:
                raise ConfigurationError(f"limit target {target!r}: the rate of queue {name!r} has no partitions")
            try:
                check_partition_form(partition, config.rate_partition)
            except ConfigurationError as error:
                raise ConfigurationError(f"limit target {target!r}: {error}") from None
    return rate_target(scope, pick_window(target, scope, per, rules.declared_rate_windows(scope)))


def check_override_value(target: str, value: object) -> int | None:
    """A live limit's value: a whole number >= 1, or None (-1) for unlimited; a rate window's is
    always a number (a rate is lowered or raised live, never lifted: reset brings back the code's)."""
    if target.startswith("rate:") and (value is None or value == -1):
        raise ConfigurationError(
            f"limit for {target}: a rate cannot be made unlimited live; set a whole number >= 1 (or reset it)"
        )
    return check_limit(f"limit for {target}", value, allow_unlimited=True)


def effective_limit(rules: Rules, target: str) -> int | None:
    """The limit in force for a live-limit target (None: unlimited)."""
    if target == GLOBAL:
        return rules.global_limit()
    kind, _, rest = target.partition(":")
    if kind == "queue":
        name, _, partition = rest.partition("/")
        return rules.queue_limit(name, partition)
    if kind == "rate":
        scope, per = split_rate_target(target)
        window = pick_window(target, scope, per, rules.declared_rate_windows(scope))
        return in_force(scope, [window], *rules.live_rates)[0].limit
    key, equals, value = rest.partition("=")
    if equals:
        return rules.tag_limit(key, value)
    if target in rules.overrides:
        return rules.overrides[target]
    declared = [t for t in rules.run_queue.tag_concurrency_limits if t.key == key and t.per_unique_value]
    return declared[0].limit if declared else None
