"""`tidegate queue why RUN`: where a queued run stands and which scope holds it back.

The explanation is computed the way a claim decides (same scopes, same
limits, same usage from holder rows), so it never disagrees with the claim.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidegate.domain.errors import RunNotFound
from tidegate.domain.model import HolderRecord, RunRecord, RunStatus
from tidegate.domain.scopes import GLOBAL, Rules
from tidegate.domain.transitions import has_room
from tidegate.storage.port import Store


@dataclass(frozen=True)
class ScopeCheck:
    scope: str
    label: str  # how an operator names it: "max_concurrent_runs", "queue api partition customer_id=3"
    used: int
    limit: int

    @property
    def ok(self) -> bool:
        return has_room(self.used, self.limit)


@dataclass(frozen=True)
class Explanation:
    run: RunRecord
    position: int | None = None  # 1-based, in its queue's claim order; None unless queued
    queued_in_queue: int | None = None
    checks: list[ScopeCheck] = field(default_factory=list)
    holders: dict[str, list[HolderRecord]] = field(default_factory=dict)  # of each saturated scope
    paused: bool = False  # its queue is paused: nothing of it is claimed until resumed

    @property
    def blocking(self) -> list[ScopeCheck]:
        return [check for check in self.checks if not check.ok]


def explain(store: Store, run_id: str) -> Explanation:
    run = store.get_run(run_id)
    if run is None:
        raise RunNotFound(f"no run with id {run_id!r}")
    if run.status is not RunStatus.QUEUED:
        return Explanation(run)
    position, total = store.queue_position(run_id)
    rules = store.rules()
    usage = store.scope_usage()
    checks = [
        ScopeCheck(need.key, label_of(need.key, rules), usage.get(need.key, 0), need.limit)
        for need in rules.scopes_for(run.queue, run.partition, run.tags)
    ]
    holders = {check.scope: store.scope_holders(check.scope) for check in checks if not check.ok}
    return Explanation(run, position, total, checks, holders, rules.is_paused(run.queue))


def label_of(scope: str, rules: Rules) -> str:
    if scope == GLOBAL:
        return "max_concurrent_runs"
    kind, _, rest = scope.partition(":")
    if kind == "queue":
        name, _, partition = rest.partition("/")
        return f"queue {name} partition {partition}" if partition else f"queue {name}"
    return f"tag {rest}"
