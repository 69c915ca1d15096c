"""Live limits: the targets in force, validate a change, preview its effect, apply it.

A change is previewed by running the claim policy over the queued runs with
the limits before and after (as if every worker had room), so `--dry-run`
counts exactly the runs the new limit would let through or hold back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from tidegate.domain.admission import Candidate, LocalUsage, admit
from tidegate.domain.model import LimitChange, RunRecord
from tidegate.domain.scopes import GLOBAL, Rules, check_override_target, check_override_value, effective_limit
from tidegate.storage.port import Store

PREVIEW_RUNS = 10_000


@dataclass(frozen=True)
class LimitPreview:
    target: str
    old: int | None
    new: int | None
    unblocked: int  # queued runs that could start now under the new limit and not the old
    blocked: int  # queued runs that could start now under the old limit and not the new
    considered: int  # queued runs looked at (the first PREVIEW_RUNS in claim order)


def preview(store: Store, target: str, limit: int | None, *, reset: bool = False) -> LimitPreview:
    rules = store.rules()
    target = check_override_target(target, rules)
    overrides = dict(rules.overrides)
    if reset:
        overrides.pop(target, None)
    else:
        overrides[target] = check_override_value(target, limit)
    after = replace(rules, overrides=overrides)
    queued = store.list_queued(limit=PREVIEW_RUNS)
    usage = store.scope_usage()
    before_ids = _startable(queued, usage, rules)
    after_ids = _startable(queued, usage, after)
    return LimitPreview(
        target,
        effective_limit(rules, target),
        effective_limit(after, target),
        unblocked=len(after_ids - before_ids),
        blocked=len(before_ids - after_ids),
        considered=len(queued),
    )


@dataclass(frozen=True)
class TargetLimit:
    """One live-limit target as `GET /limits` shows it."""

    target: str
    limit: int | None  # in force
    code_limit: int | None  # the code's: without any live override
    used: int | None  # slots held now; None for a family (`tag:KEY`: each value is its own scope)
    live: bool


def limits_in_force(rules: Rules, usage: Mapping[str, int]) -> list[TargetLimit]:
    """Every target that has a limit or holds slots: global, each declared queue and its known
    partitions, declared tag limits, live overrides and any other scope held now."""
    targets = {GLOBAL, *(f"queue:{name}" for name in rules.queues), *rules.overrides, *usage}
    for name, config in rules.queues.items():
        targets.update(f"queue:{name}/{partition}" for partition in config.concurrency.overrides or {})
    for declared in rules.run_queue.tag_concurrency_limits:
        targets.add(f"tag:{declared.key}" if declared.per_unique_value else f"tag:{declared.key}={declared.value}")
    return [
        TargetLimit(
            target,
            effective_limit(rules, target),
            code_limit(rules, target),
            None if _family(target) else usage.get(target, 0),
            target in rules.overrides,
        )
        for target in sorted(targets, key=lambda target: (target != GLOBAL, target))
    ]


def code_limit(rules: Rules, target: str) -> int | None:
    """The code's limit for the target: without any live override, its own or one it inherits
    (a per-value tag limit overridden as `tag:KEY`, a queue overridden as a whole)."""
    return effective_limit(replace(rules, overrides={}), target)


def _family(target: str) -> bool:
    return target.startswith("tag:") and "=" not in target


def set_limit(store: Store, target: str, limit: int | None) -> LimitChange:
    target = check_override_target(target, store.rules())
    return store.set_limit(target, check_override_value(target, limit))


def reset_limit(store: Store, target: str) -> LimitChange:
    return store.reset_limit(check_override_target(target, store.rules()))


def reset_limits(store: Store, target: str | None = None) -> list[LimitChange]:
    """Remove the live override of `target` (None: of every target), each audited on its own;
    a target without an override changes nothing."""
    rules = store.rules()
    targets = sorted(rules.overrides) if target is None else [check_override_target(target, rules)]
    return [store.reset_limit(each) for each in targets if each in rules.overrides]


def _startable(queued: list[RunRecord], usage: dict[str, int], rules: Rules) -> set[str]:
    """Runs the shared limits would let start now, were there workers enough.

    Per-worker caps (max_workers, local_limit) are left out: other workers
    could take what one worker may not.
    """
    rules = replace(
        rules,
        queues={
            name: replace(config, max_workers=None, concurrency=replace(config.concurrency, local_limit=None))
            for name, config in rules.queues.items()
        },
    )
    candidates = [
        Candidate(
            id=run.id,
            task=run.task,
            queue=run.queue,
            partition=run.partition,
            tags=run.tags,
            priority=run.priority,
            scheduled_at=run.scheduled_at.timestamp(),
            ordering=rules.queues[run.queue].ordering if run.queue in rules.queues else "priority",
            resumed=run.resumed,
        )
        for run in queued
    ]
    decision = admit(candidates, usage, rules, LocalUsage(), capacity=len(candidates))
    return {candidate.id for candidate, _ in decision.admitted}
