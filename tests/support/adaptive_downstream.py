"""What the adaptive tests against a fake downstream share: a backlog kept queued while the
effective limit is watched, and the audit of its moves read back as one chain.

`tests/integration/test_adaptive_downstream.py` (a queue's concurrency) and
`test_adaptive_rate_downstream.py` (a queue's rate) each bring their downstream and the limit
they watch; the way the backlog is kept and the chain is judged is written here once.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

from tidegate import App, RunStatus

QUEUE = "partner"


def keep_busy(
    app: App,
    task: Any,
    limit: Callable[[], int | None],
    until: Callable[[int, list[int]], bool],
    *,
    timeout: float,
    backlog: int,
) -> list[int]:
    """Keep `backlog` runs of `task` queued until `until(limit, seen)` holds (or the time is up);
    the limits seen, one every 50 ms."""
    seen: list[int] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queued = app.store.run_counts().get((QUEUE, RunStatus.QUEUED), 0)
        if queued < backlog:
            task.submit_many([{}] * (backlog - queued))
        now = limit()
        assert now is not None
        seen.append(now)
        if until(now, seen):
            return seen
        time.sleep(0.05)
    raise AssertionError(f"not settled within {timeout}s: limits seen {seen[-60:]}")


def assert_audited_chain(app: App, *, declared: int, least: int, now: int | None) -> list[dict[str, Any]]:
    """Every move of the adaptive limit is a `LimitChanged` of source `adaptive`: the chain starts
    at the declared limit, has no gap, never leaves [least, declared], ends at the stored value
    `now`, and holds both a fall (overloaded) and a rise (recovered). Returns the chain."""
    events = reversed(app.store.latest_events("LimitChanged", 10_000))  # oldest first
    changes = [event.metadata for event in events if event.metadata.get("source") == "adaptive"]
    assert changes and changes[0]["old"] == declared
    assert all(earlier["new"] == later["old"] for earlier, later in itertools.pairwise(changes))
    assert changes[-1]["new"] == now == declared
    assert {change["reason"] for change in changes} == {"overloaded", "recovered"}
    assert all(least <= change["new"] <= declared for change in changes)
    return changes
