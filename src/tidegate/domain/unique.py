"""Once per key: `Unique` on a task, unique and idempotency keys at submit, and what a submit meets.

A run may carry a `RunKey`: a computed key and the rule of which runs hold it. The store
keeps one row per key naming the run that last took it (a unique index over the key), and a
submit takes the key only if its run no longer holds it. Whether a run holds its key is
decided from the run's state, at submit time, so a run frees its key by leaving the listed
states with no write of its own: a failed or canceled run never holds one, and a completed run
only within `period` of its submit. The holding rule is the one `holds` below states; both
stores write it in SQL (storage/*/unique.sql) as: the run's status is one of `states`, or it
completed and `expires_at` (submit + period) is still ahead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from tidegate.domain.durations import parse_duration
from tidegate.domain.errors import InvalidArgument, TidegateError
from tidegate.domain.keys import ACTIVE_STATES, CheckedUnique, RunKey, compute_key
from tidegate.domain.model import NewRun

OnConflict = Literal["existing", "raise", "replace"]
ON_CONFLICT: tuple[str, ...] = ("existing", "raise", "replace")
_HOLDING_STATES = frozenset(ACTIVE_STATES)
# An idempotency key is kept a day unless told otherwise, at most 30 days (the store keeps a row per key).
IDEMPOTENCY_TTL = 86400.0
MAX_KEY_PERIOD = 30 * 86400.0
MAX_KEY_LENGTH = 512


class DuplicateRun(TidegateError):
    """A submit with `on_conflict="raise"` met a run holding its key; `run_id` (and, from the app,
    `handle`) is that run."""

    def __init__(self, run_id: str, task: str) -> None:
        super().__init__(f"{task}: a run with the same unique key exists: {run_id}")
        self.run_id = run_id
        self.task = task
        self.handle: Any = None  # the app attaches the existing run's RunHandle

    def __reduce__(self) -> tuple[type[DuplicateRun], tuple[str, str]]:
        return (DuplicateRun, (self.run_id, self.task))


@dataclass(frozen=True, slots=True)
class Unique:
    """Once per key for a task's runs: `@app.task(unique=Unique(...))`.

    `by_args`: every argument (True) or the named ones make the key; `by_queue`: runs of different
    queues do not meet; `period`: a completed run still holds its key this long after its submit;
    `states`: the states in which a run holds it (never failed or canceled: those runs free their
    key); `on_conflict`: "existing" returns the run holding the key (`handle.duplicate`), "raise"
    raises `DuplicateRun`, "replace" gives a still-queued holder the new args. `debounce`: a run
    waits this long after the last submit of its key, the last args win, and it starts at most
    `max_wait` after the first (with debounce, only a queued run holds the key unless `states` says).
    """

    by_args: bool | Sequence[str] = True
    by_queue: bool = False
    period: str | float | None = None
    states: Sequence[str] | None = None
    on_conflict: str = "existing"
    debounce: str | float | None = None
    max_wait: str | float | None = None

    def checked(self, task: str, parameters: Sequence[str] | None) -> CheckedUnique:
        """The rule with durations in seconds; a clear error naming the field at fault.
        `parameters`: the task's argument names when known (a key over one not there is refused)."""
        where = f"{task}: unique"
        if isinstance(self.by_args, bool):
            by_args: bool | tuple[str, ...] = self.by_args
        elif isinstance(self.by_args, Sequence) and not isinstance(self.by_args, str):
            by_args = tuple(self.by_args)
            if not by_args or not all(isinstance(name, str) and name for name in by_args):
                raise InvalidArgument(f"{where}: by_args must be True, False or a list of argument names")
            missing = [name for name in by_args if parameters is not None and name not in parameters]
            if missing:
                raise InvalidArgument(f"{where}: by_args names arguments the task does not have: {', '.join(missing)}")
        else:
            raise InvalidArgument(f"{where}: by_args must be True, False or a list of argument names")
        period = _duration(self.period, f"{where}: period")
        debounce = _duration(self.debounce, f"{where}: debounce")
        max_wait = _duration(self.max_wait, f"{where}: max_wait")
        if max_wait is not None and debounce is None:
            raise InvalidArgument(f"{where}: max_wait needs a debounce")
        if debounce is not None and max_wait is not None and debounce > max_wait:
            raise InvalidArgument(f"{where}: debounce ({self.debounce}) is longer than max_wait ({self.max_wait})")
        states = check_states(self.states, where, debounce is not None)
        if self.on_conflict not in ON_CONFLICT:
            raise InvalidArgument(
                f"{where}: on_conflict must be one of {', '.join(ON_CONFLICT)}, got {self.on_conflict!r}"
            )
        return CheckedUnique(by_args, bool(self.by_queue), period, states, self.on_conflict, debounce, max_wait)


DEFAULT_UNIQUE = CheckedUnique(False, False, None, ACTIVE_STATES, "existing", None, None)


def idempotency_run_key(task: str, key: str, ttl: str | float | None) -> RunKey:
    """An idempotency key: the run it made is returned for every submit with the key for `ttl`
    (default a day) after its submit, unless it failed or was canceled."""
    seconds = IDEMPOTENCY_TTL if ttl is None else _duration(ttl, "idempotency_ttl")
    assert seconds is not None
    return RunKey(
        compute_key(task, "idempotency", None, check_key(key, "idempotency_key")), ACTIVE_STATES, seconds, "existing"
    )


def check_key(key: Any, name: str) -> str:
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH:
        raise InvalidArgument(f"{name} must be a non-empty string of at most {MAX_KEY_LENGTH} characters, got {key!r}")
    return key


def check_states(states: Sequence[str] | None, where: str, debounced: bool) -> tuple[str, ...]:
    if states is None:
        return ("queued",) if debounced else ACTIVE_STATES
    if isinstance(states, str) or not states or any(state not in _HOLDING_STATES for state in states):
        raise InvalidArgument(
            f"{where}: states must be some of {', '.join(ACTIVE_STATES)} (failed and canceled runs never hold a key; "
            f"completed ones within period), got {states!r}"
        )
    return tuple(dict.fromkeys(states))


def _duration(value: str | float | None, name: str) -> float | None:
    if value is None:
        return None
    try:
        seconds = parse_duration(value, name=name, minimum=0.001, maximum=MAX_KEY_PERIOD)
    except ValueError as error:
        raise InvalidArgument(str(error)) from None
    return seconds


@dataclass(frozen=True, slots=True)
class Holder:
    """The run holding a key as a submit's store read it under the key's lock."""

    run_id: str
    status: str


@dataclass(frozen=True, slots=True)
class Admission:
    """What a keyed submit did with one run: `run_id` is the run that stands for it (its own, or
    the holder's when `duplicate`); `replaced`: the holder took this run's args."""

    run_id: str
    duplicate: bool = False
    replaced: bool = False


@dataclass(frozen=True, slots=True)
class KeyedPlan:
    """What a keyed batch writes: the runs to store (with the args the last submit of an in-batch
    key gave them), the stored holders to give new args (`replace`, debounce), and each run's answer."""

    store: list[NewRun]
    replace: list[tuple[str, NewRun]]  # (holder's id, the run whose args and delay it takes)
    answers: list[Admission]


def plan(runs: Sequence[NewRun], holders: Mapping[str, Holder]) -> KeyedPlan:
    """Decide each run of a batch against the holders the store read under the keys' locks.

    A run earlier in the same batch holds its key for the runs after it. Raises `DuplicateRun`
    for a run whose key says "raise" and meets a holder (the store then writes nothing).
    """
    taken: dict[str, Holder] = dict(holders)
    stored: dict[str, int] = {}  # a key taken in this batch: the index in `store` of its run
    store: list[NewRun] = []
    replacing: list[tuple[str, NewRun]] = []
    answers: list[Admission] = []
    for run in runs:
        keyed = run.unique
        holder = None if keyed is None else taken.get(keyed.key)
        if keyed is None or holder is None:
            if keyed is not None:
                taken[keyed.key] = Holder(run.id, "queued")
                stored[keyed.key] = len(store)
            store.append(run)
            answers.append(Admission(run.id))
            continue
        if keyed.on_conflict == "raise":
            raise DuplicateRun(holder.run_id, run.task)
        if not keyed.replaces or holder.status != "queued":
            answers.append(Admission(holder.run_id, duplicate=True))
        elif keyed.key in stored:  # the holder is this batch's: it takes these args before it is stored
            index = stored[keyed.key]
            store[index] = replace_args(store[index], run)
            answers.append(Admission(holder.run_id, duplicate=True, replaced=True))
        else:
            replacing.append((holder.run_id, run))
            answers.append(Admission(holder.run_id, duplicate=True, replaced=True))
    return KeyedPlan(store, replacing, answers)


def replace_args(holder: NewRun, run: NewRun) -> NewRun:
    """`holder` (not stored yet) with the args, partition and delay of a later submit of its key
    (the delay is capped by the debounce's max_wait, counted from the holder's own submit)."""
    delay = run.delay
    keyed = run.unique
    if keyed is not None and keyed.max_wait is not None:
        delay = min(delay, keyed.max_wait)
    return replace(holder, args=run.args, partition=run.partition, delay=delay)
