"""OpenTelemetry spans of a run's life, through `opentelemetry-api` only.

Without an SDK configured by the user every span here is a no-op (the API's
default provider), nothing is exported, and a submit stores no trace context.
With one, a trace reads as a tree: the submit's producer span (`send QUEUE`),
its context stored with each run (W3C traceparent) and, under it, each
attempt's consumer span (`process QUEUE`, also linked to the producer, as the
messaging conventions ask), whose children are the attempt's workflow steps
(pool waits as events) and child triggers, whose runs' attempts are again
their children. The context is carried by the run row, not by memory, so the
tree holds across processes, workers and retries.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context, get_current
from opentelemetry.environment_variables import OTEL_PYTHON_TRACER_PROVIDER
from opentelemetry.trace import INVALID_SPAN, Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tidegate.domain.children import NewChild, WaitSuspended
from tidegate.domain.model import ClaimedRun, EventRecord, NewRun, Outcome, OutcomeKind

SYSTEM = "tidegate"
_cached: tuple[object, trace.Tracer] | None = None


def off() -> bool:
    """No SDK is configured (the API's own proxy provider is in force): spans would all be no-ops, so
    none is made and submits and attempts pay nothing for tracing.

    Asked once per submit and per attempt. While no provider is set, `get_tracer_provider()` looks
    the environment up on every call (a KeyError raised and caught inside `os.environ`): the global
    it would return is read first, and the API asked only once a provider is set, or when the
    environment named one at start-up (the API then loads it on its first call). The global is the
    API's private name: read with a default, an API without it takes the public way every time."""
    if getattr(trace, "_TRACER_PROVIDER", off) is None and not _PROVIDER_FROM_ENVIRONMENT:
        return True
    return isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


_PROVIDER_FROM_ENVIRONMENT = OTEL_PYTHON_TRACER_PROVIDER in os.environ


def _tracer() -> trace.Tracer:
    """The tracer of the provider in force now (the user may set one after import, a test may swap it)."""
    global _cached
    provider = trace.get_tracer_provider()
    if _cached is None or _cached[0] is not provider:
        _cached = (provider, provider.get_tracer("tidegate"))
    return _cached[1]


_w3c = TraceContextTextMapPropagator()  # stored as W3C whatever the user's propagators, so any reader understands it


def _stored_context(span: Span) -> str | None:
    """The span's context as stored with a run (`traceparent[;tracestate]`); None when nothing traces."""
    if not span.get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _w3c.inject(carrier, context=trace.set_span_in_context(span))
    state = carrier.get("tracestate")
    return carrier["traceparent"] + (f";{state}" if state else "")


def _context_of(stored: str | None) -> Context | None:
    if not stored:
        return None
    parent, _, state = stored.partition(";")
    carrier = {"traceparent": parent, **({"tracestate": state} if state else {})}
    return _w3c.extract(carrier)


def _messaging(queue: str | None, operation: str, **more: Any) -> dict[str, Any]:
    attributes: dict[str, Any] = {"messaging.system": SYSTEM, "messaging.operation.type": operation}
    if queue is not None:
        attributes["messaging.destination.name"] = queue
    return {**attributes, **{key: value for key, value in more.items() if value is not None}}


def _single(values: Sequence[str]) -> str | None:
    distinct = sorted(set(values))
    return distinct[0] if len(distinct) == 1 else None


def current() -> Context:
    """The active context, to parent a producer span started later on another task or thread."""
    return get_current()


@contextmanager
def submitting(runs: Sequence[NewRun]) -> Iterator[list[NewRun]]:
    """The producer span of a submit (one per batch): yields the runs carrying its context, to store.
    Runs that carry a context already (traced by their caller, `submitting_each`) get no second span."""
    if off() or all(run.trace_context for run in runs):
        yield list(runs)
        return
    queue = _single([run.queue for run in runs])
    attributes = _messaging(
        queue,
        "send",
        **{
            "messaging.operation.name": "submit",
            "messaging.batch.message_count": len(runs) if len(runs) > 1 else None,
            "messaging.message.id": runs[0].id if len(runs) == 1 else None,
            "tidegate.task": _single([run.task for run in runs]),
        },
    )
    with _tracer().start_as_current_span(
        f"send {queue or 'runs'}", kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        stored = _stored_context(span)
        yield list(runs) if stored is None else [replace(run, trace_context=stored) for run in runs]


@contextmanager
def submitting_each(runs: Sequence[NewRun], parents: Sequence[Context]) -> Iterator[list[NewRun]]:
    """One producer span per run, each under its own parent (the HTTP request it came in): runs of
    several requests stored together (api/group_commit.py) still belong each to its own trace."""
    if off():
        yield list(runs)
        return
    spans = [
        _tracer().start_span(
            f"send {run.queue}",
            context=parent,
            kind=SpanKind.PRODUCER,
            attributes=_messaging(
                run.queue,
                "send",
                **{"messaging.operation.name": "submit", "messaging.message.id": run.id, "tidegate.task": run.task},
            ),
        )
        for run, parent in zip(runs, parents, strict=True)
    ]
    try:
        yield [replace(run, trace_context=_stored_context(span)) for run, span in zip(runs, spans, strict=True)]
    except Exception as error:
        for span in spans:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        raise
    finally:
        for span in spans:
            span.end()


@contextmanager
def triggering(children: Sequence[NewChild], wait: bool) -> Iterator[list[NewChild]]:
    """A child trigger's producer span (a child of the attempt's): yields the children carrying its context.
    A trigger whose wait suspends the attempt ends with a `waiting` event, not an error."""
    if off():
        yield list(children)
        return
    queue = _single([child.run.queue for child in children])
    attributes = _messaging(
        queue,
        "send",
        **{
            "messaging.operation.name": "trigger_and_wait" if wait else "trigger",
            "messaging.batch.message_count": len(children),
            "tidegate.task": _single([child.run.task for child in children]),
            "tidegate.children": [child.run.id for child in children],
        },
    )
    name = f"{'trigger_and_wait' if wait else 'trigger'} {queue or 'runs'}"
    with _tracer().start_as_current_span(
        name, kind=SpanKind.PRODUCER, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as span:
        stored = _stored_context(span)
        traced = [replace(child, run=replace(child.run, trace_context=stored)) for child in children]
        try:
            yield list(children) if stored is None else traced
        except BaseException as error:
            if isinstance(error, WaitSuspended):
                span.add_event("waiting", {"tidegate.reason": str(error)})
            else:
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            raise


UNTRACED: Span = INVALID_SPAN
"""An attempt's span while nothing traces: the worker tells it by identity, so an untraced attempt
makes no call on its span (each is a Python call, and every attempt would pay for them)."""


def attempt(run: ClaimedRun, worker_id: str) -> Span:
    """The consumer span of one attempt: a child of the submit's span and linked to it. Made current
    (`use`) while the attempt's code runs, so its steps and triggers nest under it; its outcome is set
    when the attempt is settled (`ended`) and the worker ends it when the attempt's slot is freed."""
    if off():
        return UNTRACED
    parent = _context_of(run.trace_context)
    producer = trace.get_current_span(parent).get_span_context() if parent is not None else None
    links = [Link(producer)] if producer is not None and producer.is_valid else []
    attributes = _messaging(
        run.queue,
        "process",
        **{
            "messaging.message.id": run.id,
            "tidegate.run.id": run.id,
            "tidegate.run.attempt": run.attempt,
            "tidegate.run.max_attempts": run.max_attempts,
            "tidegate.task": run.task,
            "tidegate.queue": run.queue,
            "tidegate.run.queued_seconds": run.queued_seconds,
            "tidegate.worker": worker_id,
        },
    )
    # An empty context, not the worker's: an attempt belongs to its run's trace, never to another's.
    return _tracer().start_span(
        f"process {run.queue}", context=parent or Context(), kind=SpanKind.CONSUMER, links=links, attributes=attributes
    )


def wants_scopes(span: Span) -> bool:
    """Whether the span records attributes, so reading the scopes it waited on is worth a store read."""
    return span.is_recording()


def waited_on(span: Span, events: Sequence[EventRecord], attempt_number: int) -> None:
    """`tidegate.run.waited_on`: the scopes that blocked the run between its previous claim and this one."""
    scopes: dict[str, None] = {}
    for event in events:
        if event.type == "RunDequeued":
            if event.metadata.get("attempt") == attempt_number:
                break
            scopes.clear()
        elif event.type == "RunBlocked":
            scopes.update((str(item.get("scope")), None) for item in event.metadata.get("blocked_by", []))
    span.set_attribute("tidegate.run.waited_on", list(scopes))


def ended(span: Span, outcome: Outcome | None) -> None:
    """The attempt's outcome on its span: an error status for a failure (with its first line)."""
    if not span.is_recording():
        return
    if outcome is None:
        span.set_attribute("tidegate.outcome", "handed_back_or_waiting")
        return
    span.set_attribute("tidegate.outcome", outcome.kind.value)
    if outcome.kind is OutcomeKind.FAILED:
        headline = (outcome.error or "failed").strip().splitlines()[0]
        span.set_status(Status(StatusCode.ERROR, headline))
        if outcome.retry_delay is not None:
            span.set_attribute("tidegate.retry_in_seconds", outcome.retry_delay)


@contextmanager
def step(run_id: str, key: str, try_number: int, needs: Mapping[str, int]) -> Iterator[Span]:
    """A workflow step's try, under its run's attempt; `pool_wait` / `pool_acquired` mark its pool wait."""
    attributes: dict[str, Any] = {"tidegate.run.id": run_id, "tidegate.step.key": key, "tidegate.step.try": try_number}
    if off():
        yield INVALID_SPAN
        return
    if needs:
        attributes["tidegate.step.needs"] = [f"{scope}={slots}" for scope, slots in sorted(needs.items())]
    with _tracer().start_as_current_span(f"step {key}", attributes=attributes) as span:
        yield span


def pool_wait(span: Span, needs: Mapping[str, int]) -> None:
    if needs:
        span.add_event("pool_wait", {"tidegate.step.needs": [f"{scope}={n}" for scope, n in sorted(needs.items())]})


def pool_acquired(span: Span, needs: Mapping[str, int]) -> None:
    if needs:
        span.add_event("pool_acquired")


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) in hex of the active span, for log lines; None when none is active."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def use(span: Span | None) -> Any:
    """Make `span` current for a moment (a log line about its attempt written off its thread)."""
    return _NOTHING if span is None or span is INVALID_SPAN else trace.use_span(span, end_on_exit=False)


_NOTHING = nullcontext()  # reusable, and cheaper than a generator each time
