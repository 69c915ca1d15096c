"""Child runs: what a trigger stores and what a parent's replay is answered with.

A parent triggers children in call order; each trigger takes the next
position (`index`) among the parent's children. A parent that waited runs its
function again from the top when it resumes, and each trigger is answered by
the child already stored at its position: so a replay never triggers a child
twice. The rules here (the replay check, what a trigger answers) are pure so
that both stores and the worker share them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidegate.domain.errors import NonDeterministicReplay
from tidegate.domain.jsonvalue import JSONValue
from tidegate.domain.model import NewRun, RunStatus

CANCEL = "cancel"  # a child canceled with its parent (the default)
ABANDON = "abandon"  # a child left to run when its parent is canceled


class WaitSuspended(BaseException):
    """Unwinds a task whose wait was accepted: its attempt already ended `waiting` in the store.

    A BaseException so that a task's `except Exception` does not swallow it; the
    worker reports nothing for the attempt (the store took it) and frees its slot.
    """


class TriggerCanceled(BaseException):
    """The run was asked to cancel before its trigger: nothing was stored; the attempt stops."""


@dataclass(frozen=True, slots=True)
class NewChild:
    """A child about to be stored by a trigger: the run, its position and how it is linked."""

    run: NewRun
    index: int  # its position among the parent's triggers (call order, from 0)
    awaited: bool  # the parent waits for it (trigger_and_wait); fire-and-forget children do not hold a wait
    on_parent_cancel: str = CANCEL


@dataclass(frozen=True, slots=True)
class ChildRecord:
    """A child as its parent (and `runs show`) sees it."""

    id: str
    index: int
    task: str
    queue: str
    args: dict[str, JSONValue]
    status: RunStatus
    awaited: bool
    result: JSONValue = None
    error: str | None = None
    # A unique child: the run holding its key, which this parent did not store at this position
    # (`task` and `args` are then the parent's call; the run and its outcome are the holder's).
    linked: bool = False

    @property
    def finished(self) -> bool:
        return self.status.finished


@dataclass(frozen=True, slots=True)
class TriggerRequest:
    """A running attempt's trigger, as `Store.trigger_children` takes it: store `children` for the
    attempt `fence` of `worker_id`. With `wait` the parent waits for its awaited children (on any
    one of them with `wait_any`); `release_all` releases every slot it holds while it waits, not
    only those domain/waits.py says a wait gives back."""

    fence: tuple[str, int]  # (run id, attempt)
    worker_id: str
    children: Sequence[NewChild]
    wait: bool = False
    release_all: bool = False
    wait_any: bool = False


@dataclass(frozen=True, slots=True)
class TriggerAnswer:
    """What a trigger did: the children asked for (stored now or before) and whether the
    parent now waits (its attempt is over) or was canceled meanwhile (nothing stored)."""

    children: list[ChildRecord]
    waiting: bool = False
    canceled: bool = False


def check_replay(existing: ChildRecord, run: NewRun) -> None:
    """Refuse a replay that asks, at a known position, for another task or other args.

    Args are compared as stored JSON (key order does not matter), so a value that
    round-trips through JSON the same way is the same call. A unique child whose key gives a
    queued holder the args of a later submit (`on_conflict="replace"`, a debounce) is compared
    by its task alone: its stored args may be another submit's since.
    """
    task, args = run.task, run.args
    replaced = run.unique is not None and run.unique.replaces
    if existing.task != task or (not replaced and _canonical(existing.args) != _canonical(args)):
        raise NonDeterministicReplay(
            f"trigger #{existing.index} of this run asked for {task}({_shown(args)}), but an earlier attempt "
            f"triggered {existing.task}({_shown(existing.args)}) there (child run {existing.id}); a parent must "
            "trigger the same children in the same order on every attempt"
        )


def unfinished_awaited(children: Sequence[ChildRecord]) -> list[ChildRecord]:
    """The children a wait still waits for."""
    return [child for child in children if child.awaited and not child.finished]


def wait_summary(children: Sequence[ChildRecord]) -> str:
    """'8 children (5 completed, 2 running, 1 queued)': what a waiting run waits for."""
    awaited = [child for child in children if child.awaited]
    counts: dict[str, int] = {}
    for child in awaited:
        counts[child.status.value] = counts.get(child.status.value, 0) + 1
    order = [status.value for status in RunStatus]
    parts = ", ".join(f"{counts[status]} {status}" for status in order if status in counts)
    noun = "child" if len(awaited) == 1 else "children"
    return f"{len(awaited)} {noun} ({parts})" if parts else f"{len(awaited)} {noun}"


def resume_rule(wait_any: bool) -> str:
    """When a waiting run is queued again, in the words every view uses: a window of children
    (`map_children`) goes on as soon as one slot of it frees, any other wait needs them all."""
    return "queued again when any of them ends" if wait_any else "queued again once they have all ended"


def _canonical(args: Mapping[str, Any]) -> str:
    return json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)


def _shown(args: Mapping[str, Any]) -> str:
    text = ", ".join(f"{key}={json.dumps(value, default=str)}" for key, value in args.items())
    return text if len(text) <= 120 else text[:117] + "..."
