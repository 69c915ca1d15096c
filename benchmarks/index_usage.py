"""Which indexes a representative workload reads on PostgreSQL (pg_stat_user_indexes).

    python benchmarks/index_usage.py [--runs 2000]

In a fresh schema (so every counter starts at zero): single and batched
submits to an unlimited queue and to a limited queue partitioned by tenant
(with a dispatch deadline and tags), the operator's reads while runs wait
(queued list, counts, run list with filters, `why`, position, a run and its
events), a worker draining both queues, then a sweep and a retention prune.
Prints, per index, idx_scan and idx_tup_read, and writes
results/index_usage.md. Counts, not times: the figures do not depend on load.
An index with 0 scans here is a candidate, not a verdict: the workload does
not cover workflows, children, pools or a crashed worker.
"""

from __future__ import annotations

import os
import time

import psycopg
from rich.console import Console

import tidegate
from common import fresh_database, measured_with, parse_options, write_markdown
from tidegate.engine.operators.why import explain

TENANTS = 20
console = Console()

USAGE = """
SELECT s.relname, s.indexrelname, s.idx_scan, s.idx_tup_read, pg_get_indexdef(s.indexrelid)
FROM pg_stat_user_indexes s WHERE s.schemaname = current_schema() AND s.relname LIKE 'tidegate%'
ORDER BY s.relname, s.idx_scan DESC, s.indexrelname
"""


def noop() -> None:
    """An unlimited run."""


def tenant_job(tenant: int) -> None:
    """A run limited per tenant."""


def make_app(url: str) -> tidegate.App:
    os.environ["TIDEGATE_DATABASE"] = url
    app = tidegate.App(url)
    app.queue("bench")
    app.queue(
        "tenants",
        concurrency=tidegate.Concurrency(global_limit=4, partition=tidegate.Partition(by_args=["tenant"])),
        dispatch_deadline="1h",
    )
    app.task(queue="bench", name="noop")(noop)
    app.task(queue="tenants", name="tenant_job", tags={"kind": "tenant"})(tenant_job)
    return app


def workload(app: tidegate.App, runs: int) -> None:
    noop_task, tenant_task = app.tasks["noop"], app.tasks["tenant_job"]
    for _ in range(runs // 10):
        noop_task.submit()
    noop_task.submit_many([{}] * (runs - runs // 10))
    handles = tenant_task.submit_many([{"tenant": index % TENANTS} for index in range(runs)])
    store = app.store
    store.list_queued()
    store.list_queued("tenants")
    store.queue_counts()
    store.status_counts("tenants")
    store.page_runs(status=tidegate.RunStatus.QUEUED, limit=50)
    store.page_runs(queue="tenants", task="tenant_job", tags={"kind": "tenant"}, limit=50)
    for handle in handles[:: max(1, runs // 20)]:
        explain(store, handle.id)
        store.queue_position(handle.id)
        store.get_run(handle.id)
        store.run_events(handle.id)
    app.worker(queues=["bench", "tenants"], max_workers=16, drain=True).run()
    store.page_runs(status=tidegate.RunStatus.COMPLETED)
    store.sweep("index-usage", 1.0)
    store.prune_runs(older_than=0.0, limit=runs // 2)


def main() -> None:
    options = parse_options(__doc__, runs=2000)
    with fresh_database("postgres") as url:
        app = make_app(url)
        workload(app, options.runs)
        app.close()
        time.sleep(1.5)  # other backends flush their statistics at most once a second
        with psycopg.connect(url) as connection:
            found = connection.execute(USAGE).fetchall()
    header = ["table", "index", "idx_scan", "idx_tup_read", "definition"]
    rows = [
        [table, index, f"{scans:,}", f"{reads:,}", f"`{definition}`"]
        for table, index, scans, reads, definition in found
    ]
    for row in rows:
        console.print(" | ".join(cell.strip("`") for cell in row[:4]))
    path = write_markdown(
        "index_usage",
        f"Index scans under a representative workload ({options.runs:,} runs per queue, PostgreSQL)",
        header,
        rows,
        [
            measured_with(f"python benchmarks/index_usage.py --runs {options.runs}"),
            "Workload: submits (single and batched) to an unlimited queue and to a queue limited to 4 per tenant "
            f"({TENANTS} tenants, dispatch deadline, tags); queued list, counts, run pages with filters, `why`, "
            "positions, a run and its events while runs wait; one worker drains both queues; a sweep; a prune.",
            "Not covered: workflows and their steps, children, pools, schedules, a crashed worker's rescue.",
        ],
    )
    console.print(f"written to {path}")


if __name__ == "__main__":
    main()
