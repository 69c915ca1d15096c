"""The keys of once per key (domain/unique.py): a run's key (`RunKey`), a task's checked rule, the computed key.

Kept apart from unique.py so that the model (a `NewRun` carries its key, a `TaskDefinition` its
rule) depends on these plain values only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ACTIVE_STATES: tuple[str, ...] = ("queued", "running", "waiting")


@dataclass(frozen=True, slots=True)
class RunKey:
    """What a run asks of the key store: its key, which of its states hold it, for how long when completed,
    what a submit that meets a holder does, and its debounce (seconds; the store moves a queued holder)."""

    key: str
    states: tuple[str, ...]
    period: float | None  # a completed run holds the key until submit + period; None: not at all
    on_conflict: str
    debounce: float | None = None
    max_wait: float | None = None

    @property
    def replaces(self) -> bool:
        """A submit that meets a still-queued holder gives it its args (on_conflict "replace", or a debounce)."""
        return self.on_conflict == "replace" or self.debounce is not None

    @property
    def holds(self) -> str:
        """The states as the stores match them: '|queued|running|'."""
        return "|" + "|".join(self.states) + "|"


@dataclass(frozen=True, slots=True)
class CheckedUnique:
    """A task's `Unique`, checked: what each of its runs' keys is made of."""

    by_args: bool | tuple[str, ...]
    by_queue: bool
    period: float | None
    states: tuple[str, ...]
    on_conflict: str
    debounce: float | None
    max_wait: float | None

    def to_json(self) -> dict[str, Any]:
        """The rule as the store keeps it with the task's definition (a submit by name reads it back)."""
        by_args: bool | list[str] = self.by_args if isinstance(self.by_args, bool) else list(self.by_args)
        return {
            "by_args": by_args,
            "by_queue": self.by_queue,
            "period": self.period,
            "states": list(self.states),
            "on_conflict": self.on_conflict,
            "debounce": self.debounce,
            "max_wait": self.max_wait,
        }

    @classmethod
    def from_json(cls, value: Any) -> CheckedUnique | None:
        """`to_json`'s value back (None: the task has no rule)."""
        if value is None:
            return None
        by_args = value["by_args"]
        return cls(
            by_args if isinstance(by_args, bool) else tuple(by_args),
            bool(value["by_queue"]),
            value["period"],
            tuple(value["states"]),
            value["on_conflict"],
            value["debounce"],
            value["max_wait"],
        )

    def key_of(self, task: str, queue: str, args: Mapping[str, Any], unique_key: str | None) -> RunKey | None:
        """The run's key: over `unique_key` when given, else over its args (None if by_args is False)."""
        if unique_key is not None:
            key = compute_key(task, "key", queue if self.by_queue else None, unique_key)
        elif self.by_args is False:
            return None
        else:
            chosen = args if self.by_args is True else {name: args.get(name) for name in self.by_args}
            key = compute_key(task, "args", queue if self.by_queue else None, dict(chosen))
        return RunKey(key, self.states, self.period, self.on_conflict, self.debounce, self.max_wait)


# json.dumps with these options builds an encoder per call (about a third of a key's cost); one
# encoder gives the same text. Keys are stored: the text must never change (tests/unit/test_domain_keys.py).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def compute_key(task: str, kind: str, queue: str | None, value: Any) -> str:
    """The stored key: a digest of the task, the kind of key, the queue when it counts, and the value
    (args as canonical JSON, so key order does not matter)."""
    text = _CANONICAL.encode([task, kind, queue, value])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
