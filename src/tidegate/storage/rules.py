"""The rules as stored, shared by both adapters: declarations and overrides read back, limit changes.

Both adapters store the run-queue config and each queue's config as JSON and
the overrides as rows; each reads them in its own dialect and hands the
decoded values here, so the rules a claim uses are assembled one way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tidegate.domain import events as history
from tidegate.domain.limits import RunQueueConfig, queue_from_dict, run_queue_from_dict
from tidegate.domain.model import LimitChange
from tidegate.domain.scopes import Rules, effective_limit


def stored_rules(
    run_queue: Mapping[str, Any] | None,
    queues: Iterable[Mapping[str, Any]],
    overrides: Iterable[tuple[str, int]],
    paused: Iterable[str] = (),
) -> Rules:
    """The rules from the stored run-queue config (None: never declared), queue configs, overrides
    and the names of the paused queues."""
    return Rules(
        run_queue=RunQueueConfig() if run_queue is None else run_queue_from_dict(run_queue),
        queues={config.name: config for config in map(queue_from_dict, queues)},
        overrides=dict(overrides),
        paused=frozenset(paused),
    )


def limit_change(
    before: Rules, after: Rules, target: str, version: int, *, reset: bool
) -> tuple[LimitChange, history.Event]:
    """What an override change did to `target`'s effective limit, and its LimitChanged event."""
    change = LimitChange(target, effective_limit(before, target), effective_limit(after, target), version)
    return change, history.limit_changed(target, change.old, change.new, version, reset)
