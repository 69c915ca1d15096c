"""The rules as stored, shared by both adapters: declarations and overrides read back, limit changes.

Both adapters store the run-queue config and each queue's config as JSON and
the overrides as rows; each reads them in its own dialect and hands the
decoded values here, so the rules a claim uses are assembled one way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tidegate.domain import events as history
from tidegate.domain.adaptive import by_target
from tidegate.domain.limits import RunQueueConfig, queue_from_dict, run_queue_from_dict
from tidegate.domain.model import LimitChange
from tidegate.domain.scopes import Rules, effective_limit


def stored_rules(
    run_queue: Mapping[str, Any] | None,
    queues: Iterable[Mapping[str, Any]],
    overrides: Iterable[tuple[str, int]],
    paused: Iterable[str] = (),
    adaptive: Iterable[Sequence[Any]] = (),
) -> Rules:
    """The rules from the stored run-queue config (None: never declared), queue configs, overrides,
    the names of the paused queues and the adaptive states (target, limit, successes, lowered_at,
    reason). The states' successes are as of the read: only a move of a limit moves the version."""
    return Rules(
        run_queue=RunQueueConfig() if run_queue is None else run_queue_from_dict(run_queue),
        queues={config.name: config for config in map(queue_from_dict, queues)},
        overrides=dict(overrides),
        paused=frozenset(paused),
        adaptive=by_target([tuple(row) for row in adaptive]),
    )


def limit_change(
    before: Rules, after: Rules, target: str, version: int, *, reset: bool
) -> tuple[LimitChange, history.Event]:
    """What an override change did to `target`'s effective limit, and its LimitChanged event."""
    change = LimitChange(target, effective_limit(before, target), effective_limit(after, target), version)
    return change, history.limit_changed(target, change.old, change.new, version, reset)
