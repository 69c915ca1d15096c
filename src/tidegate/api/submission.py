"""From HTTP submit requests to stored runs: every rule is the domain's, every error names its field.

Each value is checked by the same function a Python submit uses, one field
at a time so that a 422 says which one is wrong; then the app's own
`TaskOptions` builds the runs (args as JSON, their size, the task's parameters
from its code here or as stored by its workers, the partition). A batch is built whole
before one `App.enqueue` stores it, so a bad item or a full queue stores nothing.

The server may run without the user's module: a task is then known by what
its workers registered in the store (queue, priority, tags, retries, parameters).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from opentelemetry.context import Context

from tidegate.api.errors import blame
from tidegate.api.group_commit import GroupCommit
from tidegate.api.metrics import ALL_QUEUES, ServerMetrics, ceiling_queue
from tidegate.api.refusals import Refusals
from tidegate.api.schemas import AdmissionError, SubmitRequest
from tidegate.app import App, RunHandle, TaskOptions
from tidegate.app.submit import SubmitKeys
from tidegate.domain import names
from tidegate.domain.clock import Clock
from tidegate.domain.errors import AdmissionRejected, TidegateError
from tidegate.domain.limits import QueueConfig
from tidegate.domain.model import NewRun, RunRecord, TaskDefinition
from tidegate.domain.rate_costs import cost_of
from tidegate.domain.unique import check_key
from tidegate.engine.operators import runs as operator_runs
from tidegate.engine.runtime import tracing

# The 429 of a submit, and of anything that makes a run active again (an operator's retry).
REJECTED: dict[int | str, dict[str, Any]] = {
    429: {
        "model": AdmissionError,
        "description": "The queue is at its admission ceiling: retry after `Retry-After` seconds. Nothing was stored.",
        "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 1}}},
    },
}


@dataclass(frozen=True)
class Known:
    """What a request's run was built from: its task's definition and its queue's declaration.

    Kept with a refusal (api/refusals.py), so that a request refused again on the
    loop is first checked like any other, without the store.
    """

    definition: TaskDefinition
    queue: QueueConfig


@dataclass(frozen=True)
class Duplicate:
    """A request whose run met a run holding its unique or idempotency key: that run, as stored now.
    Nothing was stored for the request; it is answered 200 with the run and `duplicate`."""

    run: RunRecord


Stored = NewRun | Duplicate  # a request's answer from the store: its run, or the run holding its key


@dataclass(frozen=True)
class Refusal:
    """A request the store refused at its ceiling, with what it was checked against."""

    rejected: AdmissionRejected
    known: Known


class _RequestTarget:
    """The app as the `RunTarget` of one request's runs, reading each task and queue once.

    A bare app (a server without the user's module) reads a task's definition and a
    queue's declaration from the store, a round trip each on PostgreSQL: a batch of a
    thousand runs of one task asks once, not a thousand times, and the check that
    names the `queue` field reuses the answer the runs are built with. Given what a
    refused request was built from (`known`), it checks a repeat of it without the store.
    """

    def __init__(self, app: App, known: Known | None = None) -> None:
        self._app = app
        self._tasks: dict[str, TaskDefinition] = {}
        self._queues: dict[str, QueueConfig] = {}
        if known is not None:
            self._tasks[known.definition.name] = known.definition
            self._queues[known.queue.name] = known.queue

    @property
    def max_payload(self) -> int:
        return self._app.max_payload

    @property
    def clock(self) -> Clock:
        return self._app.clock

    def definition(self, task: str) -> TaskDefinition:
        if task not in self._tasks:
            self._tasks[task] = self._app.definition_of(task)
        return self._tasks[task]

    def queue_config(self, name: str) -> QueueConfig:
        if name not in self._queues:
            self._queues[name] = self._app.queue_config(name)
        return self._queues[name]

    def known(self, run: NewRun) -> Known:
        """What `run` was built from (both were read to build it)."""
        return Known(self._tasks[run.task], self._queues[run.queue])

    def enqueue(self, runs: Sequence[NewRun], connection: Any = None) -> list[RunHandle]:
        return self._app.enqueue(runs)  # a request's runs are stored in a transaction of the store's own

    def store(self, runs: Sequence[NewRun]) -> list[Stored]:
        """Store `runs` together; each is answered by itself, or by the run holding its key (read now,
        so the answer shows that run's own fields and status)."""
        handles = self.enqueue(runs)
        return [
            _duplicate(self._app, handle.id) if handle.duplicate else run
            for run, handle in zip(runs, handles, strict=True)
        ]

    async def enqueue_async(self, runs: Sequence[NewRun], connection: Any = None) -> list[RunHandle]:
        return await self._app.enqueue_async(runs)


async def submit_one(
    app: App,
    request: SubmitRequest,
    refusals: Refusals[Known],
    metrics: ServerMetrics,
    group: GroupCommit[tuple[SubmitRequest, Context], Stored | Refusal],
) -> Stored:
    """One run, stored with the others that arrive meanwhile; a request just refused is refused at once.

    The repeat (api/refusals.py) answers a flood's 429s without a thread or a
    store round trip, but only once the request has passed every check a stored
    one passes (against what the refused one was built from): a request that can
    never succeed is answered 422, never told to retry. Everything else is stored
    by `store_each`, in a group (api/group_commit.py).
    """
    key = (request.task, request.queue)
    recent = refusals.recent(key)
    if recent is not None:
        refused, known = recent
        _build(_RequestTarget(app, known), request, "")  # pure: the task and queue are known
        metrics.count_rejection(refused)
        raise refused
    with refusals.asking(key):
        outcome = await group((request, tracing.current()))  # its span's parent: this request's
        if isinstance(outcome, Refusal):
            refusals.remember(key, outcome.rejected, outcome.known)
            raise outcome.rejected
    refusals.forget(key)
    return outcome


def store_each(
    app: App, metrics: ServerMetrics, requests: Sequence[tuple[SubmitRequest, Context]]
) -> list[Stored | Refusal | Exception]:
    """Each request's run, its refusal, or its own error: built one by one, stored in one transaction if all fit.

    A request that fails its checks fails alone. If the store refuses the group
    (a ceiling, or anything else), each run is stored on its own instead, so each
    answer is the one it would have had alone: the group only shares the cost.
    """
    target = _RequestTarget(app)
    built: list[NewRun | Exception] = []
    for request, _ in requests:
        try:
            (run,) = _build(target, request, "")
        except TidegateError as error:
            built.append(error)
        else:
            built.append(run)
    parents = [parent for (_, parent), outcome in zip(requests, built, strict=True) if isinstance(outcome, NewRun)]
    with tracing.submitting_each([run for run in built if isinstance(run, NewRun)], parents) as traced:
        spans = iter(traced)
        outcomes: list[Stored | Refusal | Exception] = [
            next(spans) if isinstance(outcome, NewRun) else outcome for outcome in built
        ]
        return _store_all(target, metrics, outcomes)


def _store_all(
    target: _RequestTarget, metrics: ServerMetrics, outcomes: list[Stored | Refusal | Exception]
) -> list[Stored | Refusal | Exception]:
    runs = [outcome for outcome in outcomes if isinstance(outcome, NewRun)]
    if len(runs) > 1:
        try:
            stored = iter(metrics.counting_submits(partial(target.store, runs)))
        except TidegateError:
            pass  # each on its own below, for its own answer (a DuplicateRun for its own request)
        else:
            return [next(stored) if isinstance(outcome, NewRun) else outcome for outcome in outcomes]
    return _one_by_one(target, metrics, outcomes)


def _one_by_one(
    target: _RequestTarget, metrics: ServerMetrics, outcomes: list[Stored | Refusal | Exception]
) -> list[Stored | Refusal | Exception]:
    """Each run stored alone, in arrival order. Once a ceiling refused one, the later runs it
    covers are refused with the same figures without asking again: the store has just said
    it is full (api/refusals.py repeats a refusal across requests for longer)."""
    refused: list[AdmissionRejected] = []
    answers: list[Stored | Refusal | Exception] = []
    for outcome in outcomes:
        if not isinstance(outcome, NewRun):
            answers.append(outcome)
            continue
        known = next((found for found in refused if ceiling_queue(found) in (ALL_QUEUES, outcome.queue)), None)
        if known is not None:
            metrics.count_rejection(known)
            again = AdmissionRejected(known.scope, known.active, known.limit, known.retry_after)
            answers.append(Refusal(again, target.known(outcome)))
            continue
        try:
            (stored,) = metrics.counting_submits(partial(target.store, [outcome]))
        except AdmissionRejected as rejected:
            refused.append(rejected)
            answers.append(Refusal(rejected, target.known(outcome)))
        except TidegateError as error:
            answers.append(error)
        else:
            answers.append(stored)
    return answers


def _duplicate(app: App, run_id: str) -> Stored:
    record = operator_runs.get_run(app.store, run_id)
    if record is None:  # the holder was purged since: its key was free, but the submit read it held
        raise TidegateError(f"the run holding this submit's key is gone: {run_id}; submit again")
    return Duplicate(record)


def submit(app: App, requests: Sequence[SubmitRequest], *, prefix: str = "") -> list[Stored]:
    """Validate and store `requests` together (all or none); `prefix` places a batch item's fields.
    A request that met a run holding its key is answered by that run (`Duplicate`)."""
    target = _RequestTarget(app)
    runs: list[NewRun] = []
    for index, request in enumerate(requests):
        runs.extend(_build(target, request, f"{prefix}{index}." if prefix else ""))
    # One transaction for the whole batch, after this process's task and limit declarations
    # are registered (so the ceilings of a loaded module are in force), as every submit does.
    return target.store(runs)


def _build(target: _RequestTarget, request: SubmitRequest, at: str) -> list[NewRun]:
    """The request's run, checked field by field (an error names the field at fault)."""
    with blame(f"{at}task"):
        definition = target.definition(request.task)
    queue = definition.queue if request.queue is None else request.queue
    with blame(f"{at}queue"):
        config = target.queue_config(names.check_name("queue", queue))  # an undeclared queue is refused here
    with blame(f"{at}priority"):
        priority = definition.priority if request.priority is None else names.check_priority(request.priority)
    with blame(f"{at}tags"):
        tags = names.check_tags(request.tags)
    with blame(f"{at}concurrency_key"):
        key = names.check_concurrency_key(request.concurrency_key)
    keys = _keys(definition, request, at)
    with blame(f"{at}rate_cost"):
        given = request.rate_cost  # checked here, against the queue's rate, to name the field
        cost = None if given is None else cost_of(definition.name, None, given, request.args, config.rate)
    options = TaskOptions(
        target, definition, priority, tags or None, queue, request.run_at, key, keys=keys, rate_cost=cost
    )
    with blame(f"{at}run_at"):
        options.due_in()  # how far ahead a run may be: checked here to name the field
    with blame(f"{at}args"):
        return options.new_runs([request.args])


def _keys(definition: TaskDefinition, request: SubmitRequest, at: str) -> SubmitKeys:
    """The request's unique and idempotency keys, each checked under its own field's name."""
    keys = SubmitKeys(request.unique_key, request.idempotency_key, request.idempotency_ttl)
    with blame(f"{at}unique_key"):
        if request.unique_key is not None:
            check_key(request.unique_key, "unique_key")
    with blame(f"{at}idempotency_key"):
        if request.idempotency_key is not None:
            check_key(request.idempotency_key, "idempotency_key")
    field = "idempotency_ttl" if request.idempotency_ttl is not None else "idempotency_key"
    with blame(f"{at}{field}"):
        return keys.checked(definition)


def submitted_fields(run: NewRun | RunRecord) -> Mapping[str, Any]:
    return {
        "id": run.id,
        "task": run.task,
        "queue": run.queue,
        "partition": run.partition,
        "priority": run.priority,
        "tags": run.tags,
    }
