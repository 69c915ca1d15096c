"""The one table of limits in force: `tidegate limits list` (its table and `--json`), `GET /limits`
of the API and the dashboard's limits page all show these rows, so they cannot drift apart.

Rows come in the order an operator reads them: global, each declared queue then its
partitions, tag limits then each value of a per-value one, the rates (one row per window,
named by its live-limit target `rate:openai@1m`, `domain.live_rates`: a partitioned or
per-value rate's family, then each member with a stored state or an override of its own),
the named rates steps pay (`rate:@warehouse_api@1s`, `engine.operators.named_limits`),
then any other override or scope held now. Beside them, the admission ceilings (`max_active`) with the active runs
(queued, running and waiting) each one counts now.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from tidegate.domain import adaptive
from tidegate.domain.blocking import window_used
from tidegate.domain.limits import Partition, QueueConfig
from tidegate.domain.live_rates import family_targets, rate_target, window_text
from tidegate.domain.model import LimitOverride, RunStatus
from tidegate.domain.named_rates import NamedRate, code_window, named_rate_scope, window_target
from tidegate.domain.rates import Rate, RateStates
from tidegate.domain.scopes import GLOBAL, TAG_RATE_PREFIX, Rules, effective_limit, rate_scope, tag_rate_scope
from tidegate.storage.port import Store

ACTIVE = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING)  # what a ceiling counts (as admission does)


@dataclass(frozen=True)
class LimitRow:
    """One target of the table: its limit in force, the code's, and the slots held now."""

    target: str
    limit: int | None  # in force
    code_limit: int | None  # the code's: without any live override
    used: int | None  # slots held now; None where nothing is counted (a family: each member is its own scope)
    live: bool  # an operator's override is in force
    version: int | None  # the override's version, when live
    parent: str | None  # the row this one belongs to (a queue's partition, a tag limit's value)
    declared: str  # where the code declares it: "code", "code override" (a partition's own), or ""
    note: str  # what the row covers ("each customer_id partition", "per-value limit"), or ""
    adaptive: str = ""  # an adaptive queue's effective limit and why it last moved ("adaptive 4 of 20 (overloaded)")
    per: float | None = None  # a rate window: its length (s); `used` is the cost its stored state counts now
    burst: int | None = None  # a rate window: the most cost taken at one instant, in force


@dataclass(frozen=True)
class CeilingRow:
    """An admission ceiling (`max_active`): past it a submit is refused, and the active runs it counts now."""

    queue: str | None  # None: all queues
    max_active: int
    active: int


@dataclass(frozen=True)
class LimitTable:
    rules: Rules
    limits: list[LimitRow]
    ceilings: list[CeilingRow]
    overrides: list[LimitOverride]


def natural_key(text: str) -> list[Any]:
    """Sort `customer_id=2` before `customer_id=10`."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part]


def limit_table(store: Store) -> LimitTable:
    """The limits in force, the ceilings and the live overrides, read from the store now."""
    rules = store.rules()
    named = store.named_rates()
    overrides = [*store.limit_overrides(), *named_overrides(named)]
    versions = {override.target: override.version for override in overrides}
    rows = _Rows(rules, store.scope_usage(), versions, store.rate_states(), named).all()
    return LimitTable(rules, rows, ceilings(rules, store.run_counts()), overrides)


def named_overrides(named: list[NamedRate]) -> list[LimitOverride]:
    """A named rate's live override as the table of overrides lists it: one row per window."""
    return [
        LimitOverride(window_target(rate, window), window.limit, rate.version, rate.updated_at)
        for rate in named
        if rate.source == "override" and rate.updated_at is not None
        for window in rate.rates
    ]


def ceilings(rules: Rules, counts: Mapping[tuple[str, RunStatus], int]) -> list[CeilingRow]:
    """The global ceiling first, then each queue's, with the runs counting against each."""
    found = []
    if rules.run_queue.max_active is not None:
        active = sum(count for (_, status), count in counts.items() if status in ACTIVE)
        found.append(CeilingRow(None, rules.run_queue.max_active, active))
    for name in sorted(rules.queues, key=natural_key):
        ceiling = rules.max_active(name)
        if ceiling is not None:
            active = sum(count for (queue, status), count in counts.items() if queue == name and status in ACTIVE)
            found.append(CeilingRow(name, ceiling, active))
    return found


def code_limit(rules: Rules, target: str) -> int | None:
    """The code's limit for the target: without any live override, its own or one it inherits
    (a per-value tag limit overridden as `tag:KEY`, a queue overridden as a whole)."""
    return effective_limit(replace(rules, overrides={}, adaptive={}), target)


def adaptive_note(rules: Rules, target: str) -> str:
    """'adaptive 4 of 20 (overloaded)' for a target of an adaptive queue, '' for any other (the limit
    in force stays the row's: a live override wins over the adaptive limit)."""
    kind, _, rest = target.partition(":")
    name, _, _ = rest.partition("/")
    config = rules.queues.get(name) if kind == "queue" else None
    code = code_limit(rules, target)
    if config is None or config.adaptive is None or code is None:
        return ""
    if config.concurrency.partition.enabled and "/" not in rest:
        return "adaptive, each partition on its own"
    return adaptive.describe(rules.adaptive.get(target), code)


def rate_adaptive_note(rules: Rules, scope: str, window: Rate, family: bool = False) -> str:
    """'adaptive 5 of 10 (overloaded)' for an adaptive window of a rate scope, '' for any other (a
    live override still wins: the row's limit says what is in force)."""
    ceiling = window.adaptive_ceiling
    if ceiling is None:
        return ""
    if family:
        return "adaptive, each partition on its own"
    return adaptive.describe(rules.adaptive.get(rate_target(scope, window)), ceiling)


def rate_adaptive_notes(rules: Rules, scope: str) -> str:
    """Every adaptive window of a rate scope, as `queue why` names them: '1s adaptive 5 of 10 (overloaded)'."""
    notes = [
        f"{window_text(window.seconds)} {rate_adaptive_note(rules, scope, window)}"
        for window in rules.declared_rate_windows(scope)
        if window.adaptive is not None
    ]
    return "; ".join(notes)


def partition_text(partition: Partition, kind: str = "kind", sep: str = " + ") -> str:
    """What a queue is partitioned by (`customer_id`, `kind + all args`); empty when it is not."""
    parts = [kind] if partition.by_kind else []
    if partition.by_args is not None:
        parts.append(", ".join(partition.by_args) if partition.by_args else "all args")
    return sep.join(parts)


class _Rows:
    """Builds the rows once per read: each target appears once, under its parent."""

    def __init__(
        self,
        rules: Rules,
        usage: Mapping[str, int],
        versions: Mapping[str, int],
        rates: RateStates,
        named: list[NamedRate],
    ) -> None:
        self.rules, self.usage, self.versions, self.rates, self.named = rules, usage, versions, rates, named
        self.rows: list[LimitRow] = []

    def all(self) -> list[LimitRow]:
        self._add(GLOBAL, self.usage.get(GLOBAL, 0), declared="code", note="max_concurrent_runs")
        for name in sorted(self.rules.queues, key=natural_key):
            self._queue(self.rules.queues[name])
        self._tags()
        self._rates()
        self._named_rates()
        shown = {row.target for row in self.rows}
        for target in sorted(set(self.rules.overrides) - shown, key=natural_key):
            self._add(target, self.usage.get(target, 0))
        shown |= set(self.rules.overrides)
        for scope in sorted(set(self.usage) - shown, key=natural_key):
            self._add(scope, self.usage[scope], note="held, but no limit is declared for it now")
        return self.rows

    def _add(
        self, target: str, used: int | None, *, parent: str | None = None, declared: str = "", note: str = ""
    ) -> None:
        live = target in self.rules.overrides
        limit, code = effective_limit(self.rules, target), code_limit(self.rules, target)
        version = self.versions.get(target) if live else None
        adapting = adaptive_note(self.rules, target)
        self.rows.append(LimitRow(target, limit, code, used, live, version, parent, declared, note, adapting))

    def _members(self, prefix: str, known: Iterable[str] = ()) -> list[str]:
        """Targets under `prefix` declared, overridden or held now."""
        stored = (*self.rules.overrides, *self.usage, *self.rules.adaptive)
        found = {*known, *(key for key in stored if key.startswith(prefix))}
        return sorted(found, key=natural_key)

    def _queue(self, config: QueueConfig) -> None:
        parent = f"queue:{config.name}"
        declared_partitions = set(config.concurrency.overrides or {})
        members = self._members(parent + "/", (f"{parent}/{partition}" for partition in declared_partitions))
        by = partition_text(config.concurrency.partition)
        declared = "code" if config.concurrency.global_limit is not None else ""
        if by or members:
            note = f"each {by} partition" if by else "each concurrency key"
            self._add(parent, None, declared=declared, note=note)
        else:
            self._add(parent, self.usage.get(parent, 0), declared=declared)
        for target in members:
            own = target[len(parent) + 1 :] in declared_partitions
            note = "" if own else "queue's limit"
            self._add(
                target, self.usage.get(target, 0), parent=parent, declared="code override" if own else "", note=note
            )

    def _tags(self) -> None:
        covered: set[str] = set()
        for declared in self.rules.run_queue.tag_concurrency_limits:
            if declared.per_unique_value:
                parent = f"tag:{declared.key}"
                self._add(parent, None, declared="code", note="each value")
                members = self._members(parent + "=")
                for target in members:
                    live_parent = parent in self.rules.overrides and target not in self.rules.overrides
                    note = "per-value limit" + (f" (live {parent})" if live_parent else "")
                    self._add(target, self.usage.get(target, 0), parent=parent, note=note)
                covered |= {parent, *members}
            elif declared.value is not None:
                target = f"tag:{declared.key}={declared.value}"
                if target not in covered:
                    self._add(target, self.usage.get(target, 0), declared="code")
                    covered.add(target)
        for target in sorted(self.rules.overrides, key=natural_key):
            if target.startswith("tag:") and target not in covered:
                key, equals, _ = target[len("tag:") :].partition("=")
                if equals:
                    self._add(target, self.usage.get(target, 0))
                else:
                    self._add(target, None, note=f"each value of tag {key}")

    def _rates(self) -> None:
        """Each rated queue's windows (then its partitions'), then each tag rate's (then its values')."""
        for name in sorted(self.rules.queues, key=natural_key):
            self._queue_rate(self.rules.queues[name])
        self._tag_rates()

    def _queue_rate(self, config: QueueConfig) -> None:
        if not config.rate:
            return
        scope = rate_scope(config.name, "")
        if not config.rate_partition.enabled:
            self._windows(scope, declared="code")
            return
        note = f"each {partition_text(config.rate_partition)} partition"
        self._windows(scope, declared="code", note=note, counted=False)
        for member in self._rate_members(scope + "/"):
            self._windows(member, parent=scope)

    def _tag_rates(self) -> None:
        shown: set[str] = set()
        for limit in self.rules.run_queue.tag_rate_limits:
            family = f"{TAG_RATE_PREFIX}{limit.key}"
            if limit.value is not None:
                scope = tag_rate_scope(limit.key, limit.value)
                if scope not in shown:
                    shown.add(scope)
                    self._windows(scope, declared="code")
            elif family not in shown:
                shown.add(family)
                self._windows(family, declared="code", note="each value", counted=False)
                for member in self._rate_members(family + "="):
                    if member not in shown:
                        shown.add(member)
                        self._windows(member, parent=family)

    def _rate_members(self, prefix: str) -> list[str]:
        """The rate scopes under `prefix` with a stored state or a live override of their own."""
        found = {scope for scope, _ in self.rates.states if scope.startswith(prefix)}
        found |= {target.rpartition("@")[0] for target in self.rules.overrides if target.startswith(prefix)}
        return sorted(found, key=natural_key)

    def _windows(
        self, scope: str, *, parent: str | None = None, declared: str = "", note: str = "", counted: bool = True
    ) -> None:
        """A row per window of `scope`: in force, the code's, the cost its state counts now (none for
        a family), and the family override a member follows."""
        code = self.rules.declared_rate_windows(scope)
        for window, coded in zip(self.rules.rate_windows(scope), code, strict=True):
            target = rate_target(scope, window)
            live = target in self.rules.overrides
            inherited = [] if live else [rate_target(each, coded) for each in family_targets(scope)[1:]]
            follows = next((each for each in inherited if each in self.rules.overrides), "")
            self.rows.append(
                LimitRow(
                    target,
                    window.limit,
                    coded.limit,
                    window_used(scope, window, self.rates) if counted else None,
                    live,
                    self.versions.get(target) if live else None,
                    None if parent is None else rate_target(parent, coded),
                    declared,
                    note or (f"live {follows}" if follows else ""),
                    rate_adaptive_note(self.rules, scope, coded, family=not counted),
                    per=window.seconds,
                    burst=window.allowed_burst,
                )
            )

    def _named_rates(self) -> None:
        """A row per window of each named rate: in force, the code's window of that length, and
        the cost its state counts now; the note says who pays it and who waits."""
        for rate in sorted(self.named, key=lambda each: natural_key(each.name)):
            scope = named_rate_scope(rate.name)
            live = rate.source == "override"
            note = f"named rate: steps pay it · {rate.waiting} waiting"
            for window in rate.rates:
                coded = code_window(rate, window)
                self.rows.append(
                    LimitRow(
                        window_target(rate, window),
                        window.limit,
                        None if coded is None else coded.limit,
                        window_used(scope, window, self.rates),
                        live,
                        rate.version if live else None,
                        None,
                        "code" if rate.declared is not None else "",
                        note,
                        per=window.seconds,
                        burst=window.allowed_burst,
                    )
                )
