"""The one table of limits in force: `tidegate limits list` (its table and `--json`), `GET /limits`
of the API and the dashboard's limits page all show these rows, so they cannot drift apart.

Rows come in the order an operator reads them: global, each declared queue then its
partitions, tag limits then each value of a per-value one, then any other override or
scope held now. Beside them, the admission ceilings (`max_active`) with the active runs
(queued, running and waiting) each one counts now.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from tidegate.domain import adaptive
from tidegate.domain.limits import Partition, QueueConfig
from tidegate.domain.model import LimitOverride, RunStatus
from tidegate.domain.scopes import GLOBAL, Rules, effective_limit
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
    overrides = store.limit_overrides()
    versions = {override.target: override.version for override in overrides}
    rows = _Rows(rules, store.scope_usage(), versions).all()
    return LimitTable(rules, rows, ceilings(rules, store.run_counts()), overrides)


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


def partition_text(partition: Partition, kind: str = "kind", sep: str = " + ") -> str:
    """What a queue is partitioned by (`customer_id`, `kind + all args`); empty when it is not."""
    parts = [kind] if partition.by_kind else []
    if partition.by_args is not None:
        parts.append(", ".join(partition.by_args) if partition.by_args else "all args")
    return sep.join(parts)


class _Rows:
    """Builds the rows once per read: each target appears once, under its parent."""

    def __init__(self, rules: Rules, usage: Mapping[str, int], versions: Mapping[str, int]) -> None:
        self.rules, self.usage, self.versions = rules, usage, versions
        self.rows: list[LimitRow] = []

    def all(self) -> list[LimitRow]:
        self._add(GLOBAL, self.usage.get(GLOBAL, 0), declared="code", note="max_concurrent_runs")
        for name in sorted(self.rules.queues, key=natural_key):
            self._queue(self.rules.queues[name])
        self._tags()
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
