"""Declarations of run-level limits: the global cap, tag limits, tag rates and queues.

These are what users write in code (`RunQueueConfig`, `TagConcurrencyLimit`, `TagRateLimit`,
`Concurrency`, `Partition`, `QueueConfig`). Each validates itself on
construction so a negative limit or a malformed override fails where it is
written, not later inside a claim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tidegate.domain.adaptive import Adaptive
from tidegate.domain.durations import format_duration
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.integers import STORED_INT_MAX
from tidegate.domain.names import check_name, text_problem
from tidegate.domain.rates import Rate, check_rates

Ordering = Literal["priority", "fair"]


def check_limit(what: str, value: object, *, allow_unlimited: bool = False) -> int | None:
    """A limit is a positive int; `None` (and -1 where allowed) means unlimited."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{what}: a limit must be a whole number, got {value!r}")
    if value == -1 and allow_unlimited:
        return None
    if value < 1:
        raise ConfigurationError(f"{what}: a limit must be at least 1, got {value}")
    if value > STORED_INT_MAX:
        raise ConfigurationError(f"{what}: a limit must be at most {STORED_INT_MAX}, got {value}")
    return value


@dataclass(frozen=True)
class TagConcurrencyLimit:
    """At most `limit` running runs carrying tag `key=value` (or per distinct value)."""

    key: str
    limit: int
    value: str | None = None
    per_unique_value: bool = False

    def __post_init__(self) -> None:
        check_name("tag", self.key)
        check_limit(f"tag limit {self.key}", self.limit)
        if self.limit is None:
            raise ConfigurationError(f"tag limit {self.key}: a limit is required")
        _check_tag_target(f"tag limit {self.key}", self.value, self.per_unique_value)

    def scope_for(self, tags: Mapping[str, str]) -> str | None:
        """The scope a run with these tags takes under this limit, if any."""
        if self.key not in tags:
            return None
        if self.per_unique_value or tags[self.key] == self.value:
            return f"tag:{self.key}={tags[self.key]}"
        return None


def _check_tag_target(what: str, value: str | None, per_unique_value: bool) -> None:
    """A tag declaration names one value or every value, never both or neither."""
    if value is None and not per_unique_value:
        raise ConfigurationError(f"{what}: give value=... (limit runs with that value) or per_unique_value=True")
    if value is not None and per_unique_value:
        raise ConfigurationError(f"{what}: value and per_unique_value exclude each other")
    problem = None if value is None else text_problem(value)
    if problem:
        raise ConfigurationError(f"{what}: value {value!r} is not valid: {problem}")


@dataclass(frozen=True)
class TagRateLimit:
    """At most `limit` starts (cost units) per `per` of runs carrying tag `key=value`, or per
    distinct value (`per_unique_value=True`): a rate shared by every queue (domain/rates.py)."""

    key: str
    limit: int
    per: str | float
    value: str | None = None
    per_unique_value: bool = False
    burst: int | None = None
    rate: Rate = field(init=False, repr=False, compare=False)  # its window, built (and checked) once

    def __post_init__(self) -> None:
        what = f"tag rate {self.key}"
        check_name("tag", self.key)
        _check_tag_target(what, self.value, self.per_unique_value)
        try:
            object.__setattr__(self, "rate", Rate(self.limit, self.per, self.burst))
        except ConfigurationError as error:
            raise ConfigurationError(f"{what}: {error}") from None

    def applies(self, key: str, value: str) -> bool:
        """Whether a run tagged `key=value` is charged this rate."""
        return key == self.key and (self.per_unique_value or value == self.value)

    def to_dict(self) -> dict[str, object]:
        """The stored form (per in seconds)."""
        return {
            "key": self.key,
            "value": self.value,
            "per_unique_value": self.per_unique_value,
            **self.rate.to_json(),
        }


def _check_tag_rates(declared: Sequence[object]) -> tuple[TagRateLimit, ...]:
    """Tag rates, none two with one window length for one tag value: each value's windows are
    one scope's, one state per window length (`domain.rates.window_key`)."""
    rates: list[TagRateLimit] = []
    for limit in declared:
        if not isinstance(limit, TagRateLimit):
            raise ConfigurationError(f"tag_rate_limits: expected TagRateLimit, got {limit!r}")
        for other in rates:
            same_values = limit.per_unique_value or other.per_unique_value or limit.value == other.value
            if other.key == limit.key and same_values and other.rate.seconds == limit.rate.seconds:
                raise ConfigurationError(
                    f"tag rate {limit.key}: two rates with the window {format_duration(limit.rate.seconds)}"
                    " apply to one value"
                )
        rates.append(limit)
    return tuple(rates)


@dataclass(frozen=True)
class RunQueueConfig:
    """App-wide run gates: a cap on running runs and tag limits."""

    max_concurrent_runs: int | None = None
    tag_concurrency_limits: Sequence[TagConcurrencyLimit] = ()
    max_active: int | None = None  # admission ceiling: queued + running runs, all queues
    tag_rate_limits: Sequence[TagRateLimit] = ()  # starts per window per tag value, across queues

    def __post_init__(self) -> None:
        if isinstance(self.tag_rate_limits, (str, bytes)) or not isinstance(self.tag_rate_limits, Sequence):
            raise ConfigurationError(f"tag_rate_limits: expected a list of TagRateLimit, got {self.tag_rate_limits!r}")
        object.__setattr__(self, "tag_rate_limits", _check_tag_rates(self.tag_rate_limits))
        object.__setattr__(self, "max_active", check_limit("max_active", self.max_active))
        object.__setattr__(
            self,
            "max_concurrent_runs",
            check_limit("max_concurrent_runs", self.max_concurrent_runs, allow_unlimited=True),
        )
        object.__setattr__(self, "tag_concurrency_limits", tuple(self.tag_concurrency_limits))
        seen = set()
        for limit in self.tag_concurrency_limits:
            if not isinstance(limit, TagConcurrencyLimit):
                raise ConfigurationError(f"tag_concurrency_limits: expected TagConcurrencyLimit, got {limit!r}")
            marker = (limit.key, limit.value)
            if marker in seen:
                raise ConfigurationError(f"tag limit {limit.key}={limit.value or '*'} is declared twice")
            seen.add(marker)


@dataclass(frozen=True)
class Partition:
    """How a queue's limits split: by some arg keys (`[]` = all args), and/or by task kind."""

    by_args: Sequence[str] | None = None
    by_kind: bool = False

    def __post_init__(self) -> None:
        if self.by_args is not None:
            if isinstance(self.by_args, str) or not all(isinstance(key, str) and key for key in self.by_args):
                raise ConfigurationError(f"Partition.by_args must be a list of arg names, got {self.by_args!r}")
            object.__setattr__(self, "by_args", tuple(self.by_args))

    @property
    def enabled(self) -> bool:
        return self.by_args is not None or self.by_kind


@dataclass(frozen=True)
class Concurrency:
    """A queue's limits: `global_limit` across all workers and `local_limit` per worker, per partition."""

    global_limit: int | None = None
    local_limit: int | None = None
    partition: Partition = field(default_factory=Partition)
    overrides: Mapping[str, int] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "global_limit", check_limit("global_limit", self.global_limit))
        object.__setattr__(self, "local_limit", check_limit("local_limit", self.local_limit))
        overrides = dict(self.overrides or {})
        for key, value in overrides.items():
            check_partition_form(key, self.partition)
            check_limit(f"override {key!r}", value)
        if overrides and self.global_limit is None:
            raise ConfigurationError("overrides need a global_limit to override")
        object.__setattr__(self, "overrides", overrides)


def check_partition_form(key: str, partition: Partition) -> None:
    """An override must name a partition exactly as the queue produces it.

    `kind=TASK` first when partitioned by kind, then the `by_args` names in
    their declared order (sorted, for `by_args=[]`): `customer_id=42`,
    `kind=sync,region=eu`. Anything else could never match a run and would be
    silently ignored, so it is refused.
    """
    if not partition.enabled:
        raise ConfigurationError(f"override {key!r}: the queue has no partition to override")
    if not isinstance(key, str) or not key:
        raise ConfigurationError(f"override {key!r}: expected 'name=value'")
    names = []
    for part in key.split(","):
        name, equals, _ = part.partition("=")
        if not equals or not name:
            raise ConfigurationError(f"override {key!r}: expected 'name=value' parts, got {part!r}")
        names.append(name)
    expected = ["kind"] if partition.by_kind else []
    if partition.by_args == ():
        arg_names = names[len(expected) :]
        if names[: len(expected)] == expected and arg_names == sorted(set(arg_names)) and "kind" not in arg_names:
            return
        form = (
            "kind=TASK,NAME=VALUE,... (arg names sorted)" if partition.by_kind else "NAME=VALUE,... (arg names sorted)"
        )
        raise ConfigurationError(f"override {key!r} does not name a partition of this queue: expected {form}")
    expected += list(partition.by_args or ())
    unknown = [name for name in names if name not in expected]
    if unknown:
        form = ",".join(f"{name}=..." for name in expected)
        raise ConfigurationError(
            f"override {key!r}: {unknown[0]!r} is not a partition key of this queue (expected {form})"
        )
    if names != expected:
        form = ",".join(f"{name}=..." for name in expected)
        raise ConfigurationError(f"override {key!r} does not name a partition of this queue: expected {form}")


@dataclass(frozen=True)
class QueueConfig:
    """A declared queue: its limits, per-worker cap and ordering."""

    name: str
    concurrency: Concurrency = field(default_factory=Concurrency)
    max_workers: int | None = None
    ordering: Ordering = "priority"
    max_active: int | None = None  # admission ceiling for this queue
    dispatch_deadline: float | None = None  # seconds a run may stay queued before it fails "capacity:"
    rate: Sequence[Rate] = ()  # every window must allow a start (domain/rates.py)
    rate_partition: Partition = field(default_factory=Partition)  # one budget per partition of the rate
    adaptive: Adaptive | None = None  # its concurrency limit follows its downstream (domain/adaptive.py)

    def __post_init__(self) -> None:
        check_name("queue", self.name)
        if self.adaptive is not None:
            if not isinstance(self.adaptive, Adaptive):
                raise ConfigurationError(
                    f"queue {self.name}: adaptive must be a tidegate.Adaptive, got {self.adaptive!r}"
                )
            what = f"queue {self.name}"
            self.adaptive.ceiling(self.concurrency.global_limit, what)
            for partition, tier in (self.concurrency.overrides or {}).items():
                self.adaptive.ceiling(tier, f"{what} partition {partition}")
        object.__setattr__(self, "rate", check_rates(self.rate, f"queue {self.name} rate"))
        if not isinstance(self.rate_partition, Partition):
            raise ConfigurationError(
                f"queue {self.name}: rate_partition must be a Partition, got {self.rate_partition!r}"
            )
        if self.rate_partition.enabled and not self.rate:
            raise ConfigurationError(f"queue {self.name}: rate_partition needs a rate to partition")
        object.__setattr__(self, "max_active", check_limit(f"queue {self.name} max_active", self.max_active))
        if self.dispatch_deadline is not None and not self.dispatch_deadline > 0:
            raise ConfigurationError(f"queue {self.name}: dispatch_deadline must be positive")
        object.__setattr__(self, "max_workers", check_limit(f"queue {self.name} max_workers", self.max_workers))
        if self.ordering not in ("priority", "fair"):
            raise ConfigurationError(f"queue {self.name}: ordering must be 'priority' or 'fair', got {self.ordering!r}")


# --- persistence: plain dicts, so any process (and the CLI) sees the same declarations ---


def run_queue_to_dict(config: RunQueueConfig) -> dict[str, object]:
    return {
        "max_concurrent_runs": config.max_concurrent_runs,
        "tag_concurrency_limits": [
            {"key": t.key, "limit": t.limit, "value": t.value, "per_unique_value": t.per_unique_value}
            for t in config.tag_concurrency_limits
        ],
        "max_active": config.max_active,
        "tag_rate_limits": [limit.to_dict() for limit in config.tag_rate_limits],
    }


def run_queue_from_dict(data: Mapping[str, Any]) -> RunQueueConfig:
    """Back from the stored JSON (untyped, hence `Any`): each field is checked again by the config's own validation."""
    tags = data.get("tag_concurrency_limits") or []
    return RunQueueConfig(
        max_concurrent_runs=data.get("max_concurrent_runs"),
        tag_concurrency_limits=[TagConcurrencyLimit(**tag) for tag in tags],
        max_active=data.get("max_active"),
        tag_rate_limits=[TagRateLimit(**limit) for limit in data.get("tag_rate_limits") or ()],
    )


def queue_to_dict(config: QueueConfig) -> dict[str, object]:
    """The stored form; `adaptive` only when declared (so queues declared before it store as before)."""
    concurrency = config.concurrency
    adaptive = {} if config.adaptive is None else {"adaptive": config.adaptive.to_json()}
    return {
        "name": config.name,
        "global_limit": concurrency.global_limit,
        "local_limit": concurrency.local_limit,
        "by_args": None if concurrency.partition.by_args is None else list(concurrency.partition.by_args),
        "by_kind": concurrency.partition.by_kind,
        "overrides": dict(concurrency.overrides or {}),
        "max_workers": config.max_workers,
        "ordering": config.ordering,
        "max_active": config.max_active,
        "dispatch_deadline": config.dispatch_deadline,
        "rate": [rate.to_json() for rate in config.rate],
        "rate_by_args": None if config.rate_partition.by_args is None else list(config.rate_partition.by_args),
        "rate_by_kind": config.rate_partition.by_kind,
        **adaptive,
    }


def queue_from_dict(data: Mapping[str, Any]) -> QueueConfig:
    """Back from the stored JSON (untyped, hence `Any`): each field is checked again by the config's own validation."""
    return QueueConfig(
        name=data["name"],
        concurrency=Concurrency(
            global_limit=data.get("global_limit"),
            local_limit=data.get("local_limit"),
            partition=Partition(by_args=data.get("by_args"), by_kind=bool(data.get("by_kind"))),
            overrides=data.get("overrides") or None,
        ),
        max_workers=data.get("max_workers"),
        ordering=data.get("ordering", "priority"),
        max_active=data.get("max_active"),
        dispatch_deadline=data.get("dispatch_deadline"),
        rate=[Rate.from_json(rate) for rate in data.get("rate") or ()],
        rate_partition=Partition(by_args=data.get("rate_by_args"), by_kind=bool(data.get("rate_by_kind"))),
        adaptive=None if not data.get("adaptive") else Adaptive.from_json(data["adaptive"]),
    )
