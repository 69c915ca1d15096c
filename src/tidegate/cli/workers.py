"""`tidegate workers list`: the worker registry, as every claim and the sweeper see it.

A worker's id is `HOST:PID:NONCE` (`worker/loop.py`), so host and pid are read
from it (`domain.model.host_and_pid`); a worker whose heartbeat stopped stays
listed (not live) until the sweeper forgets it, which is how a killed worker shows up here.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.text import Text

from tidegate.bootstrap import DEFAULT_DATABASE
from tidegate.cli.connect import existing_store
from tidegate.cli.fit import Cell, Column, fitted_table
from tidegate.cli.options import Database, JsonOutput
from tidegate.cli.render import print_json, stdout
from tidegate.cli.scopes import age_text
from tidegate.domain.model import WorkerRecord, host_and_pid
from tidegate.engine.operators import workers as operator_workers

app = typer.Typer(help="The workers in the registry: where they run, how busy, their heartbeat.", no_args_is_help=True)


COLUMNS = [
    Column("worker", identifier=True, options={"style": "bold"}),
    Column("host", drop=1, identifier=True),  # both are in the id too
    Column("pid", drop=2, identifier=True, options={"justify": "right"}),
    Column("rank", identifier=True, options={"justify": "right"}),
    Column("busy", identifier=True, options={"justify": "right"}),  # busy/capacity
    Column("queues"),
    Column("heartbeat", options={"justify": "right"}),
]


def worker_json(worker: WorkerRecord) -> dict[str, Any]:
    host, pid = host_and_pid(worker.id)
    return {**{name: getattr(worker, name) for name in WorkerRecord.__dataclass_fields__}, "host": host, "pid": pid}


@app.command("list")
def list_workers(database: Database = DEFAULT_DATABASE, json_output: JsonOutput = False) -> None:
    """Every registered worker: id, host, pid, rank, capacity, busy, queues and heartbeat age."""
    with existing_store(database) as store:
        workers = operator_workers.list_workers(store)
    if json_output:
        print_json({"workers": [worker_json(worker) for worker in workers]})
        return
    if not workers:
        stdout.print(Text("no workers registered: start one with 'tidegate worker MODULE:APP'", style="dim"))
        return
    rows: list[list[Cell]] = []
    for worker in workers:
        host, pid = host_and_pid(worker.id)
        beat = Text(age_text(worker.heartbeat_age) + " ago")
        if not worker.live:
            beat = Text(age_text(worker.heartbeat_age) + " ago (gone)", style="bold red")
        rows.append(
            [
                worker.id,
                Text(host),
                "-" if pid is None else str(pid),
                str(worker.rank),
                f"{worker.busy}/{worker.capacity}",
                Text(" ".join(worker.queues)),
                beat,
            ]
        )
    gap = 1 if stdout.width >= 100 else 0
    stdout.print(fitted_table(COLUMNS, rows, stdout.width, gap=gap))
