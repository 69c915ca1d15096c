"""Where a submit, a claim, a completion and a hand-off spend their time on PostgreSQL (issue 16, step 1).

    python benchmarks/profile_postgres.py [--reps 7] [--backlog 100000] [--skip-worker]

Each operation is driven through tidegate's public API (`Task.submit`, and
the `Store` port's `register_worker` / `cycle`, as the worker calls it) on a
fresh schema, with `pg_trace.Tracer` on the store, three times over: once
counting (round trips, statements, prepared or not, rows), once with the
transaction's locks read just before its COMMIT, once with auto_explain
giving each statement's executor time. Operations:

- submit: one `submit()` per run (the first, which also registers the
  task and the limits, is reported apart);
- claim 8: a cycle with 8 free slots and nothing to report, on a queue with
  no limit, a global cap (`max_concurrent_runs=4`), a queue limit
  (`global_limit=4`) and a tag limit (4 runs tagged t=a);
- complete 1 + claim 1: the worker's turn after a run ends (its start and
  outcome reported, the freed slot claimed again in the same transaction):
  the hand-off at a limit;
- complete 1 (claim 0): the report alone, as a full worker sends it;
- blocked: a claim of 1 that finds the one eligible run next to a backlog of
  --backlog runs blocked behind saturated partitions (after ANALYZE), and
  the same with no backlog; and the idle cycle (nothing eligible, 8 slots).

Counts are exact whatever the load; times are not (the machine is shared):
read them as ratios within one run. Server ms is auto_explain's executor
time (planning not included); wait ms is what the client waited per round
trip (server + network + libpq); client ms is the call's wall time less the
wait: tidegate and psycopg Python together. `profile_worker.py` splits the
client side further (cProfile) and measures the hand-off in a running worker.
Writes benchmarks/results/postgres_profile.md and .json.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from rich.console import Console

import tidegate
from blocked_backlog import fill
from common import RESULTS, fresh_database, measured_with
from pg_trace import Checkout, Tracer
from tidegate import Concurrency, Outcome, OutcomeKind, RunQueueConfig, TagConcurrencyLimit
from tidegate.domain.model import CycleRequest, WorkerRegistration

WORKER = "profile:worker"
LEASE = 60.0
SLOTS = 8
LIMIT = 4
console = Console()
Op = Callable[[], object]


def limited_app(kind: str, url: str) -> tuple[tidegate.App, tidegate.Task]:
    """An app whose one task runs on a queue with no limit, or behind one kind of limit (of 4)."""
    run_queue = None
    tags = None
    if kind == "global cap":
        run_queue = RunQueueConfig(max_concurrent_runs=LIMIT)
    elif kind == "tag limit":
        run_queue = RunQueueConfig(tag_concurrency_limits=[TagConcurrencyLimit("t", LIMIT, value="a")])
        tags = {"t": "a"}
    app = tidegate.App(url, run_queue=run_queue)
    if kind == "queue limit":
        app.queue("work", concurrency=Concurrency(global_limit=LIMIT))

    @app.task(queue="work", name="noop", tags=tags)
    def noop(i: int = 0) -> None:
        """Never run here: the profile drives the store verbs itself."""

    return app, noop


class Profile:
    """Samples per operation label, from each of the three passes."""

    def __init__(self) -> None:
        self.timed: dict[str, list[float]] = {}
        self.counted: dict[str, list[list[Checkout]]] = {}
        self.locked: dict[str, list[list[Checkout]]] = {}
        self.explained: dict[str, list[list[Checkout]]] = {}
        self.planning: dict[str, dict[str, float]] = {}  # set-up -> statement -> planning ms

    def row(self, label: str, rtt: float) -> dict[str, Any]:
        samples = self.counted[label]
        steady = samples[-1]
        walls = self.timed[label]
        statements = [s for c in steady for s in c.statements]
        locks = Counter(
            lock_name(kind, mode, what)
            for checkouts in self.locked.get(label, [])[-1:]
            for checkout in checkouts
            for kind, mode, what in checkout.locks
        )
        explained = self.explained.get(label, [])
        server = [sum(checkout.server_ms for checkout in checkouts) for checkouts in explained]
        per_statement: dict[str, list[float]] = {}
        for checkouts in explained:
            for checkout in checkouts:
                for statement in checkout.statements:
                    if statement.server_ms is not None:
                        per_statement.setdefault(statement.name, []).append(statement.server_ms)
        return {
            "op": label,
            "checkouts": len(steady),
            "round_trips": sum(c.round_trips for c in steady),
            "statements": len(statements),
            "prepared": sum(s.prepared for s in statements),
            "sent": [f"{s.name}{'*' if s.prepared else ''}({s.rows})" for s in statements],
            "locks": dict(locks),
            "wall_ms": statistics.median(walls),
            "server_ms": statistics.median(server) if server else 0.0,
            "rtt_ms": rtt * sum(c.round_trips for c in steady),
            "plans": {name: (generic, custom) for c in steady for name, generic, custom in c.plans},
            "server_by_statement": {name: statistics.median(ms) for name, ms in per_statement.items()},
        }


def lock_name(kind: str, mode: str, what: str) -> str:
    """Advisory locks by role (objsubid 2: two int4 keys, the rules fence; 1: one bigint key, a claim
    turn or an admission ceiling), tables by name, indexes and sequences only counted."""
    if kind == "advisory":
        role = "rules fence" if what == "2" else "claim turn / ceiling"
        return f"advisory {mode} ({role})"
    relkind, _, name = what.partition(" ")
    if relkind == "r":
        return f"{mode} {name}"
    return f"{mode} on an index or sequence"


MODES = ("count", "time", "locks", "explain")  # counting first: it warms the plan and prepare caches up


@contextmanager
def traced(store: tidegate.Store, mode: str) -> Iterator[Tracer | None]:
    """No tracer for the timing pass: its wall times are the calls' own."""
    if mode == "time":
        yield None
        return
    tracer = Tracer(store, locks=mode == "locks", explain=mode == "explain", plans=mode == "count")
    try:
        yield tracer
    finally:
        tracer.close()


def record(profile: Profile, mode: str, tracer: Tracer | None, label: str, op: Op) -> object:
    if tracer is not None:
        tracer.take()
    started = time.perf_counter()
    result = op()
    wall = (time.perf_counter() - started) * 1000
    if tracer is None:
        profile.timed.setdefault(label, []).append(wall)
        return result
    checkouts = tracer.take()
    if mode == "count":
        profile.counted.setdefault(label, []).append(checkouts)
    elif mode == "locks":
        profile.locked.setdefault(label, []).append(checkouts)
    else:
        profile.explained.setdefault(label, []).append(checkouts)
    return result


def limited_ops(profile: Profile, kind: str, reps: int) -> None:
    """Submits, then claim / complete-and-claim / complete turns, in each of the three passes."""
    with fresh_database("postgres") as url:
        app, task = limited_app(kind, url)
        store = app.store
        task.submit_many([{"i": i} for i in range(3 * reps * SLOTS + 50)])
        store.register_worker(WorkerRegistration(WORKER, SLOTS, ["work"], False, LEASE))
        for mode in MODES:
            with traced(store, mode) as tracer:
                if kind == "no limit":
                    submit_ops(profile, mode, tracer, app, task, reps)
                for _ in range(reps):
                    cycle = record(profile, mode, tracer, f"claim {SLOTS} ({kind})", claim(store, SLOTS))
                    held = list(cycle.claimed)  # type: ignore[attr-defined]
                    first = held.pop(0)
                    cycle = record(profile, mode, tracer, f"complete 1 + claim 1 ({kind})", finish(store, [first], 1))
                    held += list(cycle.claimed)  # type: ignore[attr-defined]
                    record(profile, mode, tracer, f"complete 1, claim 0 ({kind})", finish(store, held[:1], 0))
                    store.cycle(CycleRequest(WORKER, ["work"], fences(held[1:]), outcomes(held[1:]), 0, LEASE))
                if tracer is not None and mode == "count":
                    profile.planning[kind] = planning_ms(url, tracer.examples, tracer.query("claim_fence"))
        app.close()


def submit_ops(
    profile: Profile, mode: str, tracer: Tracer | None, app: tidegate.App, task: tidegate.Task, reps: int
) -> None:
    if mode in ("time", "count"):  # a new app: its first submit registers the task and the limits first
        fresh = tidegate.App(app.database)

        @fresh.task(queue="work", name="noop")
        def fresh_task(i: int = 0) -> None:
            """Never run: only submitted."""

        with traced(fresh.store, mode) as fresh_tracer:
            record(profile, mode, fresh_tracer, "first submit of an app", lambda: fresh_task.submit(i=0))
        fresh.close()
    for index in range(3 * reps):
        record(profile, mode, tracer, "submit (one call per run)", functools.partial(task.submit, i=index))


def claim(store: tidegate.Store, slots: int, worker: str = WORKER, queue: str = "work") -> Op:
    return lambda: store.cycle(CycleRequest(worker, [queue], [], [], slots, LEASE))


def fences(runs: list[Any]) -> list[tuple[str, int]]:
    return [(run.id, run.attempt) for run in runs]


def outcomes(runs: list[Any]) -> list[Outcome]:
    return [Outcome(run.id, run.attempt, OutcomeKind.COMPLETED) for run in runs]


def finish(store: tidegate.Store, runs: list[Any], slots: int, worker: str = WORKER, queue: str = "work") -> Op:
    return lambda: store.cycle(CycleRequest(worker, [queue], fences(runs), outcomes(runs), slots, LEASE))


def blocked_ops(profile: Profile, backlog: int, reps: int) -> None:
    """The claim that finds the one eligible run beside a blocked backlog, and the idle cycle, after ANALYZE."""
    label = f"{backlog:,} blocked"
    with fresh_database("postgres") as url:
        tidegate.App(url).store.close()  # migrated, so that autovacuum can be kept off the runs table
        with psycopg.connect(url, autocommit=True) as connection:
            # As blocked_backlog.py: no autovacuum working on the fresh rows while the claims are timed.
            connection.execute("ALTER TABLE tidegate_runs SET (autovacuum_enabled = off)")
        app, _ = fill(url, backlog, 5000)
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("ANALYZE tidegate_runs")
        store, task = app.store, app.tasks["backlog_noop"]
        store.register_worker(WorkerRegistration(WORKER, SLOTS, ["blocked"], False, LEASE))
        store.cycle(CycleRequest(WORKER, ["blocked"], [], [], SLOTS, LEASE))  # records the block reasons once
        for mode in MODES:
            with traced(store, mode) as tracer:
                for index in range(reps):
                    record(
                        profile,
                        mode,
                        tracer,
                        f"idle cycle, {SLOTS} slots ({label})",
                        claim(store, SLOTS, queue="blocked"),
                    )
                    task.submit(p=f"eligible-{mode}-{index}")
                    cycle = record(
                        profile, mode, tracer, f"claim 1 eligible ({label})", claim(store, 1, queue="blocked")
                    )
                    run = cycle.claimed  # type: ignore[attr-defined]
                    store.cycle(CycleRequest(WORKER, ["blocked"], fences(run), outcomes(run), 0, LEASE))
                if tracer is not None and mode == "count":
                    profile.planning[label] = planning_ms(url, tracer.examples, tracer.query("claim_fence"))
        app.close()


PLANNED = ("claim_window", "claim_runs", "claim_partitions", "cycle_reports", "enqueue", "enqueue_lock", "next_due")


def planning_ms(url: str, examples: dict[str, tuple[str, Any]], fence: str) -> dict[str, float]:
    """Planning time of the statements planned at every call (custom plans), with the parameters last
    sent, after the claim fence (which turns enable_sort off for the claim's transaction); rolled back."""
    found: dict[str, float] = {}
    with psycopg.connect(url) as connection:
        connection.execute("SET jit = off")
        for name in PLANNED:
            if name not in examples:
                continue
            query, params = examples[name]
            times = []
            for _ in range(5):
                connection.execute(fence)
                plan = connection.execute("EXPLAIN (SUMMARY ON, COSTS OFF) " + query, params).fetchall()
                connection.rollback()
                times += [float(line.split(":")[1].split()[0]) for (line,) in plan if line.startswith("Planning Time")]
            if times:
                found[name] = statistics.median(times)
    return found


def round_trip_floor(calls: int = 300) -> float:
    """The median time of the emptiest round trip through psycopg on this machine, now (ms)."""
    with fresh_database("postgres") as url, psycopg.connect(url, autocommit=True) as connection:
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            connection.execute("SELECT 1").fetchone()
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def markdown(profile: Profile, rows: list[dict[str, Any]], rtt: float, command: str, notes: list[str]) -> str:
    lines = [
        "# PostgreSQL profile: what each operation costs",
        "",
        measured_with(command),
        "",
        f"Round-trip floor (median `SELECT 1` on one connection, same run): {rtt:.3f} ms.",
        "",
        "| operation | round trips | statements (prepared) | wall ms | server ms | RTT floor ms | rest ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        rest = row["wall_ms"] - row["server_ms"] - row["rtt_ms"]
        lines.append(
            f"| {row['op']} | {row['round_trips']} | {row['statements']} ({row['prepared']}) | {row['wall_ms']:.2f} "
            f"| {row['server_ms']:.2f} | {row['rtt_ms']:.2f} | {rest:.2f} |"
        )
    lines += ["", "## Statements (steady state; `*` prepared, (rows returned)) and locks held at COMMIT", ""]
    for row in rows:
        lines.append(f"- **{row['op']}**: {' -> '.join(row['sent'])}")
        if row["locks"]:
            lines.append(f"  - locks: {', '.join(f'{lock} x{count}' for lock, count in sorted(row['locks'].items()))}")
        slow = sorted(row["server_by_statement"].items(), key=lambda item: -item[1])[:4]
        if slow:
            lines.append(f"  - server ms (auto_explain, median): {', '.join(f'{name} {ms:.3f}' for name, ms in slow)}")
    plans: dict[str, tuple[int, int]] = {}
    for row in rows:
        plans.update(row["plans"])
    lines += ["", "## Plan cache of the profiling connection at the end (generic plans / custom plans)", ""]
    lines.append(", ".join(f"{name} {generic}/{custom}" for name, (generic, custom) in sorted(plans.items())))
    lines += ["", "## Planning ms of the statements planned at every call (EXPLAIN SUMMARY, median of 5)", ""]
    for setup, times in profile.planning.items():
        lines.append(f"- {setup}: {', '.join(f'{name} {ms:.3f}' for name, ms in times.items())}")
    lines += ["", *notes, ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--kinds", default="no limit,global cap,queue limit,tag limit")
    options = parser.parse_args()
    profile = Profile()
    for kind in options.kinds.split(","):
        console.print(f"[dim]{kind}[/]")
        limited_ops(profile, kind, options.reps)
    for backlog in (0, options.backlog):
        console.print(f"[dim]backlog {backlog:,}[/]")
        blocked_ops(profile, backlog, options.reps)
    rtt = round_trip_floor()
    rows = [profile.row(label, rtt) for label in profile.counted]
    notes = [
        "Counts (round trips, statements, rows, locks) are exact. Times are medians of --reps calls on a",
        "machine shared with other work: compare them within this file only. wall ms: the public call, untraced;",
        "server ms: auto_explain's executor time of its statements (no parse, plan or protocol); RTT floor:",
        "round trips x the emptiest round trip; rest: wall less both (tidegate + psycopg Python, server",
        "parse/plan/protocol per statement, and the machine's noise).",
        "Row locks taken by FOR UPDATE are the rows of claim_window / claim_partitions / lock_scopes / locked;",
        "pg_locks shows the advisory and relation locks only.",
    ]
    RESULTS.mkdir(exist_ok=True)
    command = "python benchmarks/profile_postgres.py " + f"--reps {options.reps} --backlog {options.backlog}"
    (RESULTS / "postgres_profile.md").write_text(markdown(profile, rows, rtt, command, notes))
    raw = {"rtt_ms": rtt, "operations": rows, "planning_ms": profile.planning}
    (RESULTS / "postgres_profile.json").write_text(json.dumps(raw, indent=1) + "\n")
    console.print(markdown(profile, rows, rtt, command, notes))


if __name__ == "__main__":
    main()
