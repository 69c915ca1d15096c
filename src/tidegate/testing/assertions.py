"""What a test asserts about an app's store: runs submitted (or not), and why a run waits.

Each reads the store the app uses through the engine's operator services, as the CLI does
(`runs.page_runs`, `why.explain`): a run submitted by the code under test is found whether
it was stored by a task's `submit`, a child trigger or a schedule's tick.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tidegate.app import App, RunHandle, Task
from tidegate.domain.model import RunRecord, RunStatus
from tidegate.engine.operators.runs import page_runs
from tidegate.engine.operators.why import explain

PAGE = 500
SHOWN = 5  # runs a failed assertion lists


def submitted(
    app: App,
    task: Task | str,
    *,
    args: Mapping[str, Any] | None = None,
    tags: Mapping[str, str] | None = None,
    queue: str | None = None,
) -> list[RunRecord]:
    """The runs of `task` (oldest first) whose args include `args`, carrying every tag of `tags`, on `queue`."""
    name = task if isinstance(task, str) else task.name
    expected = _as_stored(args or {})
    return [run for run in _runs_of(app, name, tags, queue) if _includes(run.args, expected)]


def assert_submitted(
    app: App,
    task: Task | str,
    *,
    args: Mapping[str, Any] | None = None,
    count: int | None = None,
    tags: Mapping[str, str] | None = None,
    queue: str | None = None,
) -> list[RunRecord]:
    """Fail unless runs of `task` matching were submitted: `count` of them, or at least one. Returns them.

    `args` is a subset: the run's args must have each key with an equal value (compared as
    stored, so a tuple equals a list). Runs in any status count, finished ones too.
    """
    if count is not None and count < 0:
        raise ValueError(f"count must be 0 or more, got {count!r}")
    found = submitted(app, task, args=args, tags=tags, queue=queue)
    if (count is None and found) or len(found) == count:
        return found
    wanted = "at least 1 run" if count is None else f"{count} run{'s' if count != 1 else ''}"
    name = task if isinstance(task, str) else task.name
    every = _runs_of(app, name, None, None)
    shown = "; ".join(_run_text(run) for run in every[:SHOWN]) or "none"
    raise AssertionError(
        f"expected {wanted} of {_described(task, args, tags, queue)}, found {len(found)}"
        f" (runs of {name}: {shown}{' ...' if len(every) > SHOWN else ''})"
    )


def refute_submitted(
    app: App,
    task: Task | str,
    *,
    args: Mapping[str, Any] | None = None,
    tags: Mapping[str, str] | None = None,
    queue: str | None = None,
) -> None:
    """Fail if any run of `task` matching was submitted (`args` a subset, as in `assert_submitted`)."""
    found = submitted(app, task, args=args, tags=tags, queue=queue)
    if found:
        shown = "; ".join(_run_text(run) for run in found[:SHOWN])
        raise AssertionError(f"expected no run of {_described(task, args, tags, queue)}, found {len(found)}: {shown}")


def assert_blocked(app: App, run: RunHandle | RunRecord | str, *, by: str) -> None:
    """Fail unless `run` is held back by scope `by` now (`"queue:emails/customer_id=7"`, `"pool:gpu"`,
    `"tag:tenant=acme"`, `"global"`): the check `tidegate queue why` makes, on the live usage."""
    run_id = run if isinstance(run, str) else run.id
    explanation = explain(app.store, run_id)
    blocking = {check.scope: check for check in explanation.blocking}
    if by in blocking:
        return
    record = explanation.run
    if blocking:
        held = ", ".join(f"{check.scope} ({check.used}/{check.limit} in use)" for check in blocking.values())
        reason = f"it is held back by {held}"
    elif explanation.paused:
        reason = f"its queue {record.queue} is paused"
    elif record.status is RunStatus.QUEUED:
        reason = "no scope holds it back"
    else:
        reason = f"it is {record.status.value}"
    raise AssertionError(f"run {run_id} ({record.task}) is not blocked by {by!r}: {reason}")


def _runs_of(app: App, task: str, tags: Mapping[str, str] | None, queue: str | None) -> list[RunRecord]:
    runs: list[RunRecord] = []
    before: str | None = None
    while page := page_runs(app.store, task=task, tags=tags, queue=queue, before=before, limit=PAGE):
        runs.extend(page)
        before = page[-1].id
    return runs[::-1]


def _as_stored(args: Mapping[str, Any]) -> dict[str, Any]:
    """`args` as a run stores them (JSON), so expected values compare as the stored ones do."""
    value: dict[str, Any] = json.loads(json.dumps(dict(args)))
    return value


def _includes(actual: Mapping[str, Any], expected: Mapping[str, Any]) -> bool:
    return all(key in actual and actual[key] == value for key, value in expected.items())


def _described(
    task: Task | str, args: Mapping[str, Any] | None, tags: Mapping[str, str] | None, queue: str | None
) -> str:
    parts = [task if isinstance(task, str) else task.name]
    if args:
        parts.append(f"with args including {dict(args)!r}")
    if tags:
        parts.append(f"tagged {dict(tags)!r}")
    if queue is not None:
        parts.append(f"on queue {queue!r}")
    return " ".join(parts)


def _run_text(run: RunRecord) -> str:
    return f"{run.id} {run.status.value} args={run.args!r}"
