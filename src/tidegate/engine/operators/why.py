"""Why a run waits: where it stands, every layer it needs, who holds the full ones, and when.

The one explanation behind `tidegate queue why RUN` and `GET /api/v1/runs/{id}/why`
(two renderings). Its limits and pause are `domain.blocking.verdict`, the answer
every list and count of blocked runs gives too, computed the way a claim decides
(same scopes, same limits, same usage from holder rows), so it never disagrees
with the claim nor with them.
Besides the run-level scopes it checks the workers serving the run's queue
(a layer only when one is live: full workers hold every run back) and, for a
running workflow, the pools and named rates its waiting steps ask for. A waiting parent: the
children it waits for and the slots it released and kept meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidegate.domain.backpressure import RATE_WINDOW_SECONDS, eta_seconds
from tidegate.domain.blocking import Check, rate_check, verdict
from tidegate.domain.children import ChildRecord, resume_rule, wait_summary
from tidegate.domain.errors import RunNotFound
from tidegate.domain.model import HolderRecord, RunRecord, RunStatus, WorkerRecord
from tidegate.domain.named_rates import named_rate_of, named_rate_scope
from tidegate.domain.pools import pool_of
from tidegate.domain.scopes import GLOBAL, Rules
from tidegate.domain.transitions import has_room
from tidegate.engine.operators.limit_table import adaptive_note, rate_adaptive_notes
from tidegate.storage.port import Store

WORKERS = "workers"  # the worker-capacity layer's scope key: `workers:QUEUE` (not a stored scope)
AHEAD_READ = 1000  # queued runs ahead of a blocked one read to count those competing for its scope
RUNNING_READ = 1000  # running runs read to name the holders of full workers


@dataclass(frozen=True)
class ScopeCheck:
    scope: str
    label: str  # how an operator names it: "max_concurrent_runs", "queue api partition customer_id=3"
    used: int
    limit: int
    slots: int = 1  # what the run (or its waiting step) asks of it
    rate: Check | None = None  # a rate scope: the verdict's check (its period, and the wait when held)

    @property
    def ok(self) -> bool:
        return self.rate.ok if self.rate is not None else has_room(self.used, self.limit, self.slots)

    @property
    def layer(self) -> str:
        """global, queue, tag, workers or pool: the gate this check belongs to."""
        return GLOBAL if self.scope == GLOBAL else self.scope.partition(":")[0]


@dataclass(frozen=True)
class Explanation:
    run: RunRecord
    position: int | None = None  # 1-based, in its queue's claim order; None unless queued
    queued_in_queue: int | None = None
    checks: list[ScopeCheck] = field(default_factory=list)
    holders: dict[str, list[HolderRecord]] = field(default_factory=dict)  # of each saturated scope
    eta_seconds: float | None = None  # when the blocking layers should have room; None: no pace known (or none block)
    paused: bool = False  # its queue is paused: nothing of it is claimed until resumed
    children: list[ChildRecord] = field(default_factory=list)  # a waiting run's children

    @property
    def waiting_for(self) -> str | None:
        """A waiting run: '3 children (1 completed, 2 running)'; None otherwise."""
        if self.run.status is not RunStatus.WAITING:
            return None
        return wait_summary(self.children)

    @property
    def resumes(self) -> str | None:
        """A waiting run: when it is queued again (any child's end, or all of theirs); None otherwise."""
        if self.run.status is not RunStatus.WAITING:
            return None
        return resume_rule(self.run.wait_any)

    @property
    def blocking(self) -> list[ScopeCheck]:
        return [check for check in self.checks if not check.ok]


def explain(store: Store, run_id: str) -> Explanation:
    run = store.get_run(run_id)
    if run is None:
        raise RunNotFound(f"no run with id {run_id!r}")
    if run.status is RunStatus.RUNNING:
        return _waiting_steps(store, run)
    if run.status is RunStatus.WAITING:  # what it waits for and released: run.wait_released / wait_kept
        return Explanation(run, children=store.run_children(run.id))
    if run.status is not RunStatus.QUEUED:
        return Explanation(run)
    position, total = store.queue_position(run_id)
    rules = store.rules()
    # what every list says too
    found = verdict(
        run.queue, run.partition, run.tags, rules, store.scope_usage(), run.rate_partition, store.rate_states()
    )
    checks = [
        ScopeCheck(
            check.scope,
            label_of(check.scope, rules),
            check.used,
            check.limit,
            rate=check if check.per is not None else None,
        )
        for check in found.checks
    ]
    workers = [worker for worker in store.list_workers() if worker.live and run.queue in worker.queues]
    if workers:
        checks.append(_worker_check(run.queue, workers))
    blocking = [check for check in checks if not check.ok]
    holders = {check.scope: _holders(store, check, workers) for check in blocking}
    eta = _eta(store, run, rules, position, blocking)
    return Explanation(run, position, total, checks, holders, eta, found.paused)


def label_of(scope: str, rules: Rules) -> str:
    if scope == GLOBAL:
        return "max_concurrent_runs"
    kind, _, rest = scope.partition(":")
    if kind == "queue":
        name, _, partition = rest.partition("/")
        label = f"queue {name} partition {partition}" if partition else f"queue {name}"
        adapting = adaptive_note(rules, scope)
        return f"{label} ({adapting})" if adapting else label
    if kind == WORKERS:
        return f"workers serving queue {rest}"
    if kind == "pool":
        return f"pool {rest}"
    if kind == "rate":
        adapting = rate_adaptive_notes(rules, scope)
        return f"rate {rest} ({adapting})" if adapting else f"rate {rest}"
    return f"tag {rest}"


def _worker_check(queue: str, workers: list[WorkerRecord]) -> ScopeCheck:
    """The live workers serving `queue`, as one layer: full only when every one of them is full."""
    used = sum(min(worker.busy, worker.capacity) for worker in workers)
    scope = f"{WORKERS}:{queue}"
    return ScopeCheck(scope, f"workers serving queue {queue}", used, sum(worker.capacity for worker in workers))


def _holders(store: Store, check: ScopeCheck, workers: list[WorkerRecord]) -> list[HolderRecord]:
    if check.layer != WORKERS:
        return store.scope_holders(check.scope)
    ids = {worker.id for worker in workers}
    running = store.page_runs(status=RunStatus.RUNNING, limit=RUNNING_READ)
    return [_run_holder(check.scope, run) for run in running if run.worker_id in ids]


def _run_holder(scope: str, run: RunRecord) -> HolderRecord:
    """A running run as the holder of one slot of its worker (workers keep no holder rows)."""
    since = run.started_at or run.scheduled_at
    return HolderRecord(scope, run.id, run.id, run.attempt, run.worker_id, 1, since, run.lease_expires_at or since)


def _eta(store: Store, run: RunRecord, rules: Rules, position: int, blocking: list[ScopeCheck]) -> float | None:
    """The latest of the blocking layers' ETAs; None if one has no known pace (or nothing blocks).

    A rate's ETA is its next allowed start (`domain.rates`, from the stored state), for the run at
    the head of its rate partition.

    Competitors counted are the runs ahead in the run's own queue that need the
    same scope: runs of other queues sharing a global or tag scope are not. A
    scope's runs end `limit` at a time (a partition's limit for a partition, the
    live workers' capacity for the workers layer), at the pace of the runs that
    free its slots (`domain.backpressure`); a scope over its limit (lowered live)
    must first shed the excess.
    """
    if not blocking:
        return None
    ahead = store.list_queued(run.queue, limit=min(position - 1, AHEAD_READ)) if position > 1 else []
    etas = []
    for check in blocking:
        if check.rate is not None:  # the stored next allowed start, not a pace of ends
            etas.append(check.rate.allowed_in)
            continue
        competing = sum(1 for other in ahead if check.layer == WORKERS or _needs(rules, other, check.scope))
        queue, partition, tags = _ended_in(check.scope)
        pace = store.run_pace(RATE_WINDOW_SECONDS, queue=queue, partition=partition, tags=tags)
        ends_needed = competing + check.used + check.slots - check.limit
        etas.append(eta_seconds(ends_needed, check.limit, pace))
    known = [eta for eta in etas if eta is not None]
    return max(known) if len(known) == len(etas) else None


def _needs(rules: Rules, run: RunRecord, scope: str) -> bool:
    return any(need.key == scope for need in rules.scopes_for(run.queue, run.partition, run.tags))


def _ended_in(scope: str) -> tuple[str | None, str | None, dict[str, str] | None]:
    """(queue, partition, tags): the `run_pace` filters of the runs whose end frees a slot of `scope`."""
    kind, _, rest = scope.partition(":")
    if kind == "queue":
        queue, _, partition = rest.partition("/")
        return queue, partition or None, None
    if kind == WORKERS:
        return rest, None, None
    if kind == "tag":
        key, _, value = rest.partition("=")
        return None, None, {key: value}
    return None, None, None


def _waiting_steps(store: Store, run: RunRecord) -> Explanation:
    """A running workflow: the configured pools and the named rates its waiting steps (of this
    attempt) ask for; a rate with the wait until it allows the step, from its stored state."""
    asked: dict[str, int] = {}
    for step in store.run_steps(run.id):
        if step.waiting_for and step.attempt == run.attempt:
            for scope, slots in step.waiting_for.items():
                if pool_of(scope) is not None or named_rate_of(scope) is not None:
                    asked[scope] = max(asked.get(scope, 0), slots)
    pools = {f"pool:{pool.name}": pool for pool in store.pools() if pool.limit is not None}
    checks = [
        ScopeCheck(scope, f"pool {pools[scope].name}", pools[scope].claimed, pools[scope].limit or 0, slots)
        for scope, slots in sorted(asked.items())
        if scope in pools
    ]
    holders = {check.scope: store.pool_holders(pools[check.scope].name) for check in checks if not check.ok}
    rated = {scope: cost for scope, cost in asked.items() if named_rate_of(scope) is not None}
    checks += _named_rate_checks(store, rated)
    eta = max(
        (check.rate.allowed_in or 0.0 for check in checks if check.rate is not None and not check.ok), default=None
    )
    return Explanation(run, checks=checks, holders=holders, eta_seconds=eta)


def _named_rate_checks(store: Store, asked: dict[str, int]) -> list[ScopeCheck]:
    """The named rates waiting steps pay ({scope: cost}), each judged at its stored state now."""
    if not asked:
        return []
    windows = {named_rate_scope(rate.name): rate.rates for rate in store.named_rates()}
    states = store.rate_states()
    checks = []
    for scope, cost in sorted(asked.items()):
        if scope not in windows:
            continue
        check = rate_check(scope, windows[scope], states, cost)
        checks.append(ScopeCheck(scope, f"rate {named_rate_of(scope)}", check.used, check.limit, cost, rate=check))
    return checks
