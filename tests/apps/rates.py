"""Rates under load: an app whose no-op task logs when each attempt starts, on the database's clock.

`tests.apps.rates:app` is what the worker processes of
`tests/process/test_rates_processes.py` run. Each execution appends
`start <run id> <attempt> <t>` to `$TIDEGATE_TEST_LOG` (one O_APPEND write per
line), `t` read from the database's clock at the start of the task's body
(PostgreSQL's `clock_timestamp()`; SQLite has no clock of its own: the
machine's, which its store uses too). The declarations come from
`make_app`, so the test and the workers agree on them exactly: a rate of 50
starts per second (burst 10), one budget per `p`. `tests.apps.rates:global_app`
adds a global rate over the same runs: every run of its task carries the tag
`fleet=paced` (the task's own tag, there only), and a tag rate of 120 starts per second
(burst 20) on that value charges them all, whatever their partition.

With `$TIDEGATE_TEST_SKIP_RATE_CHARGE` set, the claim never charges a rate
(the decision's `RateCharger.charge` answers "no rate"): the mutation the proof must catch. With
`$TIDEGATE_TEST_IGNORE_LIVE_RATES` set, the claim ignores live rate overrides: the
mutation the live-change proof must catch.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import tidegate
from tidegate import Context, Partition, Rate, RunQueueConfig, TagRateLimit
from tidegate.domain import rate_charger, scopes

if os.environ.get("TIDEGATE_TEST_SKIP_RATE_CHARGE"):
    rate_charger.RateCharger.charge = lambda self, candidate, tags, lead=0: ()  # type: ignore[method-assign]  # the mutation
if os.environ.get("TIDEGATE_TEST_IGNORE_LIVE_RATES"):
    # the mutation of tests/process/test_live_rates_processes.py: the claim applies the code's
    # windows, never a live override of them
    scopes.in_force = lambda scope, declared, *rest: tuple(declared)  # type: ignore[assignment]

RATE_PER_SECOND = 50
# A claim takes at most the burst per partition: a burst of a fifth of the limit lets a claim every
# 0.2 s keep up (a loaded machine claims far less often than every 1/50 s), at the price of the
# steady rate the limiter promises, limit + 1 - burst = 41 per second (docs/rates.md).
BURST = 10
RATE = Rate(limit=RATE_PER_SECOND, per="1s", burst=BURST)
# The global rate over every run: a tag rate on the one value every run carries. A claim takes at
# most the burst, so a burst of 20 keeps up with a claim every 0.17 s, at the price of the steady
# rate, limit + 1 - burst = 101 per second: below five partitions' 5 x 41, so it binds first.
GLOBAL_TAG = ("fleet", "paced")
GLOBAL_RATE = TagRateLimit(key=GLOBAL_TAG[0], value=GLOBAL_TAG[1], limit=120, per="1s", burst=20)
_clock_lock = threading.Lock()
_clock: list[object] = []  # this process's connection to the database's clock (PostgreSQL), made on first use


def database_time(database: str) -> float:
    """Now on the database's clock, in seconds since the epoch."""
    if not database.startswith("postgres"):
        return time.time()
    import psycopg

    with _clock_lock:
        if not _clock:
            _clock.append(psycopg.connect(database, autocommit=True))
        connection = _clock[0]
        row = connection.execute("SELECT extract(epoch FROM clock_timestamp())::double precision").fetchone()  # type: ignore[attr-defined]
    return float(row[0])


def _log(line: str) -> None:
    fd = os.open(os.environ["TIDEGATE_TEST_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def make_app(database: str | None = None, *, global_rate: bool = False) -> tidegate.App:
    """The rated app; `global_rate`: with `GLOBAL_RATE` over every run as well."""
    run_queue = RunQueueConfig(tag_rate_limits=[GLOBAL_RATE] if global_rate else [])
    app = tidegate.App(database, run_queue=run_queue)
    app.queue("paced", rate=RATE, rate_partition=Partition(by_args=["p"]))

    @app.task(name="rates.tick", queue="paced", tags=dict([GLOBAL_TAG]) if global_rate else {})
    def tick(ctx: Context, p: int) -> int:
        _log(f"start {ctx.run_id} {ctx.attempt} {database_time(os.environ['TIDEGATE_DATABASE']):.6f}")
        return p

    return app


app = make_app()
global_app = make_app(global_rate=True)


def read_starts(path: Path) -> dict[tuple[str, int], float]:
    """Every attempt's start on the database's clock, by (run id, attempt)."""
    starts: dict[tuple[str, int], float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                _, run_id, attempt, at = line.split()
                starts[(run_id, int(attempt))] = float(at)
    return starts


def most_in_a_window(times: list[float], per: float) -> int:
    """The most starts in any half-open window [t, t + per) (some such window starts at a start)."""
    ordered = sorted(times)
    most, end = 0, 0
    for begin, at in enumerate(ordered):
        end = max(end, begin)
        while end < len(ordered) and ordered[end] < at + per:
            end += 1
        most = max(most, end - begin)
    return most


# A start this long after its charge waited on the machine, not on tidegate: a commit whose fsync or
# WAL checkpoint stalled, a worker process descheduled on a loaded CI machine. Seen once in CI: 12 s.
STALLED = 0.5
MOST_STALLED = 0.02  # of the starts (one at least): more stalls than this are no longer the machine's doing


def prompt_starts(starts: dict[Any, float], charged: dict[Any, float]) -> tuple[dict[Any, float], float, int]:
    """The starts that followed their charge promptly, the largest lag among them, and how many
    stalled (a lag of `STALLED` or more). Every start follows its charge (none before it), and
    stalls are rare: the rate is kept at the charge instants, which the proofs check over every
    run; a window of `per` less the returned lag proves the prompt starts."""
    lags = {key: at - charged[key] for key, at in starts.items()}
    assert min(lags.values()) >= -0.001, min(lags.values())  # no start before its charge
    prompt = {key: starts[key] for key, lag in lags.items() if lag < STALLED}
    stalled = len(starts) - len(prompt)
    assert stalled <= max(1, MOST_STALLED * len(starts)), sorted(lags.values())[-stalled:]
    return prompt, max(lags[key] for key in prompt), stalled


def steady_rate(times: list[float]) -> float:
    """Starts per second between the 10th and 90th percentile of the starts: the backlog's steady
    pace, without the first burst and the tail."""
    ordered = sorted(times)
    low, high = len(ordered) // 10, (len(ordered) * 9) // 10
    span = ordered[high] - ordered[low]
    return (high - low) / span if span > 0 else float("inf")
