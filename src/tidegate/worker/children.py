"""A running attempt's link to its children: triggers, answers, and the wait that ends the attempt.

Each trigger takes the next positions among the run's children (call order).
A run that waited runs its function again from the top when it resumes; each
trigger it replays is answered from the store (the child stored at that
position, checked to be the same call), so no child is ever triggered twice.
A wait that cannot be answered yet ends the attempt in the store (`waiting`,
no worker held) and unwinds the task's code with `WaitSuspended`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tidegate.domain.children import (
    ABANDON,
    CANCEL,
    ChildRecord,
    NewChild,
    TriggerCanceled,
    TriggerRequest,
    WaitSuspended,
    check_replay,
)
from tidegate.domain.errors import InvalidArgument
from tidegate.engine.runtime import tracing
from tidegate.engine.runtime.children import RunsBuilder, Triggerable, builder_of
from tidegate.storage.port import Fence, Store

RELEASE_ALL = "all"


class ChildLink:
    """One attempt's triggers: positions, the children known so far, the store calls."""

    def __init__(
        self, store: Store, fence: Fence, worker_id: str, on_resumed: Callable[[int], None] | None = None
    ) -> None:
        self._store = store
        self._on_resumed = on_resumed  # told once, at the first wait this attempt finds answered
        self._fence = fence
        self._worker_id = worker_id
        self._next = 0
        # Read once, at the first trigger; a first attempt has none (only attempts of this run trigger them).
        self._known: dict[int, ChildRecord] | None = {} if fence[1] == 1 else None
        self._lock = threading.Lock()
        self._replayed = False  # some trigger was answered from the store
        self._stored = False  # some trigger wrote to the store (children, or the attempt's wait)

    @property
    def replayed_only(self) -> bool:
        """Every trigger of this attempt so far was a replay answered from the store: its body
        wrote nothing of its own, so a value it returns now is the whole of a resumed run's work."""
        return self._replayed and not self._stored

    def trigger(
        self,
        task: Triggerable | RunsBuilder,
        many_args: Sequence[Mapping[str, Any]],
        *,
        wait: bool,
        release: str | None = None,
        on_parent_cancel: str = CANCEL,
    ) -> list[ChildRecord]:
        """Trigger one child per args (or find each stored by an earlier attempt); with `wait`,
        return them once all have ended, or raise WaitSuspended after ending the attempt waiting."""
        if on_parent_cancel not in (CANCEL, ABANDON):
            raise InvalidArgument(f"on_parent_cancel must be {CANCEL!r} or {ABANDON!r}, got {on_parent_cancel!r}")
        if release not in (None, RELEASE_ALL):
            raise InvalidArgument(f"release must be None or {RELEASE_ALL!r}, got {release!r}")
        runs = builder_of(task).new_runs(many_args)  # checked before anything is stored
        with self._lock:
            first = self._next
            self._next += len(runs)
            known = self._known_children()
        children = [
            NewChild(run, first + offset, awaited=wait, on_parent_cancel=on_parent_cancel)
            for offset, run in enumerate(runs)
        ]
        answered = self._answer_locally(children, known, wait)
        if answered is not None:
            if wait and not self._replayed and self._on_resumed is not None:
                self._on_resumed(len(answered))
            self._replayed = True
            return answered
        self._stored = True
        with tracing.triggering(children, wait) as traced:
            answer = self._store.trigger_children(
                TriggerRequest(self._fence, self._worker_id, traced, wait, release == RELEASE_ALL)
            )
            if answer.canceled:
                raise TriggerCanceled("canceled")
            with self._lock:
                known.update((child.index, child) for child in answer.children)
            if answer.waiting:
                raise WaitSuspended(f"waiting for {len(answer.children)} children")
        return answer.children

    def _known_children(self) -> dict[int, ChildRecord]:
        if self._known is None:
            self._known = {child.index: child for child in self._store.run_children(self._fence[0])}
        return self._known

    @staticmethod
    def _answer_locally(
        children: Sequence[NewChild], known: Mapping[int, ChildRecord], wait: bool
    ) -> list[ChildRecord] | None:
        """A replay whose children are all stored (and ended, when awaited) needs no store write."""
        found = []
        for child in children:
            stored = known.get(child.index)
            if stored is None:
                return None
            check_replay(stored, child.run)
            if wait and not (stored.awaited and stored.finished):
                return None
            found.append(stored)
        return found
