"""`tidegate sweep`: recover stuck runs now, without a worker (`engine.operators.sweep`, as `POST /api/v1/sweep`)."""

from __future__ import annotations

from rich.text import Text

from tidegate.bootstrap import DEFAULT_DATABASE
from tidegate.cli.connect import existing_store
from tidegate.cli.options import Database, JsonOutput
from tidegate.cli.render import print_json, stdout
from tidegate.engine.operators.sweep import sweep_now


def sweep(database: Database = DEFAULT_DATABASE, json_output: JsonOutput = False) -> None:
    """Recover stuck runs now, without a worker: re-queue (or fail) runs whose lease expired.

    Also frees leaked slots and fails runs past their dispatch deadline, as a worker's sweeper does."""
    with existing_store(database) as store:
        report = sweep_now(store, "cli-sweep")
    if json_output:
        print_json({"swept": report is not None, "report": report})
        return
    if report is None:
        stdout.print(Text("a worker's sweeper is sweeping right now: nothing to do (try again in a few seconds)"))
        return
    if not report:
        stdout.print(Text("nothing to recover: no run is past its lease and no slot leaked", style="dim"))
        return
    parts = []
    if report.requeued:
        parts.append(f"re-queued {len(report.requeued)} run(s): {', '.join(report.requeued)}")
    if report.failed:
        parts.append(f"failed {len(report.failed)} run(s): {', '.join(report.failed)}")
    if report.leaks_repaired:
        parts.append(f"freed {report.leaks_repaired} leaked slot holder(s)")
    if report.step_slots_expired:
        parts.append(f"freed {report.step_slots_expired} expired step slot(s)")
    parts.extend(
        f"could not recover run {run_id} (left as it is): {error}" for run_id, error in report.unapplied.items()
    )
    for part in parts:
        stdout.print(Text(part), soft_wrap=True)  # run ids are to be copied: never wrapped
