"""Live limits: the rules and usage in force, read a limit as said, validate a change, preview
its effect, apply it.

The table of limits in force is `engine.operators.limit_table`.

A change is previewed by running the claim policy over the queued runs with
the limits before and after (as if every worker had room), so `--dry-run`
counts exactly the runs the new limit would let through or hold back.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tidegate.domain.admission import Candidate, LocalUsage, admit
from tidegate.domain.errors import InvalidArgument
from tidegate.domain.model import HolderRecord, LimitChange, RunRecord
from tidegate.domain.named_rates import window_target
from tidegate.domain.rates import RateStates
from tidegate.domain.scopes import Rules, check_override_target, check_override_value, effective_limit
from tidegate.engine.operators import named_limits
from tidegate.storage.port import Store

PREVIEW_RUNS = 10_000
UNLIMITED = "unlimited"
UNLIMITED_WORDS = (UNLIMITED, "none")  # the words for "no limit"; a number never means it


def parse_limit(text: str, name: str = "LIMIT") -> int | None:
    """A limit as an operator types it (the CLI's LIMIT, the dashboard's form): a whole number
    (checked >= 1 by `check_override_value`) or `unlimited` (also `none`).

    Only a word lifts a limit: a negative number or an empty field is refused with that hint
    (-1 means unlimited only in Python's config and in the API's JSON), so a typo or an empty
    variable never lifts a cap silently."""
    cleaned = text.strip().lower()
    if cleaned in UNLIMITED_WORDS:
        return None
    try:
        value = int(cleaned)
    except ValueError:
        raise InvalidArgument(f"{name} {text!r} is not valid: use a whole number >= 1 or {UNLIMITED!r}") from None
    if value < 0:
        raise InvalidArgument(
            f"{name} {text!r} is not valid: to lift the limit say {UNLIMITED!r}; else a whole number >= 1"
        )
    return value


@dataclass(frozen=True)
class LimitPreview:
    target: str
    old: int | None
    new: int | None
    unblocked: int  # queued runs that could start now under the new limit and not the old
    blocked: int  # queued runs that could start now under the old limit and not the new
    considered: int  # queued runs looked at (the first PREVIEW_RUNS in claim order)
    held: int | None  # slots of the target held now (None: no holder row names it)
    waiting: int | None = None  # a named rate's window: the steps waiting for the rate now (runs never pay it)


@dataclass(frozen=True)
class TargetNow:
    """A target as it is now: normalised, its limit in force, and whether a live override sets it."""

    target: str
    limit: int | None
    live: bool


def rules(store: Store) -> Rules:
    """The rules in force: the declarations, the live overrides and the pauses, under one version."""
    return store.rules()


def scope_usage(store: Store) -> dict[str, int]:
    """Slots in use per scope: the sum of its live holder rows (scopes with none are left out)."""
    return store.scope_usage()


def rate_states(store: Store) -> RateStates:
    """The rate states that may still hold a start back, with the database's time of the read."""
    return store.rate_states()


def scope_holders(store: Store, scope: str) -> list[HolderRecord]:
    """The holder rows of `scope` now: who holds its slots, how many, until when."""
    return store.scope_holders(scope)


def check_target(store: Store, target: str) -> str:
    """A live-limit target validated and normalised: a named rate's window (`named_limits`), or
    any other target against the rules (`domain.scopes.check_override_target`)."""
    if named_limits.is_named(target):
        return named_limits.find(store, target).target
    return check_override_target(target, store.rules())


def target_now(store: Store, target: str) -> TargetNow:
    """What `limits reset` says when there is nothing to reset: the limit in force and its source."""
    if named_limits.is_named(target):
        found = named_limits.find(store, target)
        return TargetNow(found.target, found.window.limit, found.rate.source == "override")
    rules = store.rules()
    checked = check_override_target(target, rules)
    return TargetNow(checked, effective_limit(rules, checked), checked in rules.overrides)


def preview(store: Store, target: str, limit: int | None, *, reset: bool = False) -> LimitPreview:
    """What a change would do to the queued runs, or (a named rate's window) the limit it would
    put in force and the steps waiting for the rate: nothing is changed."""
    if named_limits.is_named(target):
        return _named_preview(store, target, limit, reset)
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
    rates = store.rate_states()
    before_ids = _startable(queued, usage, rules, rates)
    after_ids = _startable(queued, usage, after, rates)
    return LimitPreview(
        target,
        effective_limit(rules, target),
        effective_limit(after, target),
        unblocked=len(after_ids - before_ids),
        blocked=len(before_ids - after_ids),
        considered=len(queued),
        held=usage.get(target),
    )


def _named_preview(store: Store, target: str, limit: int | None, reset: bool) -> LimitPreview:
    found = named_limits.find(store, target)
    new = found.code_limit if reset else check_override_value(found.target, limit)
    return LimitPreview(found.target, found.window.limit, new, 0, 0, 0, None, waiting=found.rate.waiting)


def set_limit(store: Store, target: str, limit: int | None) -> LimitChange:
    target = check_target(store, target)
    value = check_override_value(target, limit)
    if named_limits.is_named(target):
        assert value is not None  # check_override_value refuses to lift a rate
        return named_limits.set_window(store, target, value)
    return store.set_limit(target, value)


def reset_limit(store: Store, target: str) -> LimitChange:
    if named_limits.is_named(target):
        changes = named_limits.reset(store, target)
        if changes:
            return changes[0]
        found = named_limits.find(store, target)
        return LimitChange(found.target, found.window.limit, found.window.limit, found.rate.version)
    return store.reset_limit(check_override_target(target, store.rules()))


def reset_limits(store: Store, target: str | None = None) -> list[LimitChange]:
    """Remove the live override of `target` (None: of every target, named rates' too), each
    audited on its own; a target without an override changes nothing."""
    if target is not None and named_limits.is_named(target):
        return named_limits.reset(store, target)
    rules = store.rules()
    targets = sorted(rules.overrides) if target is None else [check_override_target(target, rules)]
    changes = [store.reset_limit(each) for each in targets if each in rules.overrides]
    if target is None:
        for rate in named_limits.overridden(store):
            changes += named_limits.reset(store, window_target(rate, rate.rates[0]))
    return changes


def _startable(queued: list[RunRecord], usage: dict[str, int], rules: Rules, rates: RateStates) -> set[str]:
    """Runs the shared limits and the rates (their stored states now) would let start now, were
    there workers enough.

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
            rate_partition=run.rate_partition,  # each charged one cost unit: the list does not carry its cost
        )
        for run in queued
    ]
    decision = admit(candidates, usage, rules, LocalUsage(), len(candidates), rate_states=rates.states, now=rates.now)
    return {candidate.id for candidate, _ in decision.admitted}
