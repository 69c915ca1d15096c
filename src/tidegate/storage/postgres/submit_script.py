"""PostgreSQL: a submit's statements as one script, run the same way on every kind of connection.

A submit is the same statements and the same decisions whoever holds the connection: the
store's pool (sync, `unique.py`), its async pool, or the caller's own connection inside the
caller's transaction (`submits.py`). The script is a generator that yields each statement
(`Step`) and is sent back the rows of those it reads; `script_runner.py` drives it over a
sync or an async connection. So the enqueue rules (the ceilings counted under their locks,
the keys judged under theirs, `domain.unique.plan`) are written once, with no I/O of their
own, and an async submit or one in the caller's transaction cannot drift from a sync one.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tidegate.domain.jsonvalue import dumps
from tidegate.domain.model import NewRun
from tidegate.domain.transitions import Ceiling
from tidegate.domain.unique import Admission, plan
from tidegate.storage.postgres.activity import pace_of, pace_params
from tidegate.storage.postgres.payloads import enqueue_payload, payload_json
from tidegate.storage.shared.uniqueness import batch_keys, holders_of, key_rows, replace_params

T = TypeVar("T")
Rows = list[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class Step:
    """One named statement (runs.sql, unique.sql, activity.sql). `read`: the script needs its rows;
    in a pipeline only a read waits for the server, the other statements travel with the next."""

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)
    read: bool = False


Script = Generator[Step, Rows, T]


def submit(runs: Sequence[NewRun]) -> Script[list[Admission]]:
    """A batch, keyed or not, in the transaction the runner holds: each run's answer."""
    if any(run.unique is not None for run in runs):
        return (yield from keyed(runs))
    if runs:
        yield from enqueue(runs)
    return [Admission(run.id) for run in runs]


def enqueue(runs: Sequence[NewRun]) -> Script[None]:
    """The runs and their RunQueued events with the wake-up, all or none: the rules fence, then one
    lock per admission ceiling the batch meets (key order), then the count and the insert
    (`enqueue` in runs.sql, which stores nothing past a ceiling). Refused: `AdmissionRejected`
    with a hint from the ceiling's pace, read in the same transaction."""
    yield Step("enqueue_fence")
    yield Step("enqueue_lock", {"queues": sorted({run.queue for run in runs})})
    refused = yield Step("enqueue", {"runs": enqueue_payload(runs)}, read=True)
    if refused:
        queue, active, limit, incoming = refused[0]
        pace = yield Step("run_pace", pace_params(queue=queue), read=True)
        raise Ceiling(queue, limit, incoming).rejection(active, pace_of(pace[0]))


def keyed(runs: Sequence[NewRun]) -> Script[list[Admission]]:
    """A batch whose runs may carry a unique claim: one advisory lock per key (key order); the
    holders read after them (READ COMMITTED: every submit of those keys committed before the locks
    were granted is seen); `plan` decides each run; the holders to replace are updated, the new
    runs stored by `enqueue` (ceilings included) and their keys taken. A `DuplicateRun` or a
    refusal raises out of the script, and the runner rolls its transaction (or savepoint) back."""
    keys = batch_keys(runs)
    yield Step("unique_lock", {"keys": keys})
    held = yield Step("unique_holders", {"keys": keys}, read=True)
    decided = plan(runs, holders_of(held))
    answers = list(decided.answers)
    for holder_id, run in decided.replace:
        updated = yield Step("unique_replace", {**replace_params(holder_id, run), "args": dumps(run.args)}, read=True)
        if not updated:  # started since it was read: it stays as it is, a duplicate
            answers = [_kept(answer, holder_id) for answer in answers]
    if decided.store:
        yield from enqueue(decided.store)
        yield Step("unique_take", {"keys": payload_json(key_rows(decided.store))})
    return answers


def _kept(answer: Admission, holder_id: str) -> Admission:
    return Admission(answer.run_id, duplicate=True) if answer.run_id == holder_id and answer.replaced else answer
