"""Inside W2's report-and-claim transaction: its two batches on the wire (PostgreSQL).

    python benchmarks/slot_wire.py [--runs 400] [--repeat 1]

`slot_idle.py`'s W2 drain with `pg_trace.Tracer` on the store. libpq stamps every
protocol message it traces; for each store cycle sent as two batches (a limited
claim: reports, fence, rules, turn, window and scope reads, then `admit` in
Python, then the writes and the COMMIT), the medians of: sending batch 1 (psycopg
queues each statement), waiting for its first answer (the server's work, then
the wire), reading its answers, the client between the batches (`admit`, the
second batch built), sending batch 2, waiting for its answer (the writes, and
the COMMIT's WAL flush), reading it. libpq's tracing adds to the client parts.
"""

from __future__ import annotations

import re
import statistics
import time
from datetime import datetime
from typing import Any

from common import fresh_database, parse_options
from pg_trace import Tracer
from slot_idle import build

LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\t([FB])\t\d+\t(\w+)")
PARTS = (
    "batch 1 sent",
    "batch 1 first answer",
    "batch 1 answers read",
    "client between the batches",
    "batch 2 sent",
    "batch 2 first answer",
    "batch 2 answers read",
)


def batches(text: str) -> list[list[float]]:
    """[first sent, last sent, first answer, last answer] of each batch the client sent."""
    found: list[list[float]] = []
    answered = True
    for line in text.splitlines():
        match = LINE.match(line)
        if match is None:
            continue
        at = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
        if match.group(2) == "F":
            if answered:
                found.append([at, at, 0.0, 0.0])
                answered = False
            found[-1][1] = at
        elif found:
            if not answered:
                found[-1][2] = at
                answered = True
            found[-1][3] = at
    return found


def one_run(runs: int) -> list[tuple[float, ...]]:
    bodies: dict[str, tuple[float, float]] = {}
    with fresh_database("postgres") as url:
        app, job = build(url, bodies)
        job.submit_many([{"i": i} for i in range(runs)])
        tracer = Tracer(app.store)
        worker = app.worker(queues=["bench"], max_workers=8)
        worker.start()
        while len(bodies) < runs:
            time.sleep(0.005)
        worker.stop()
        raw: list[Any] = list(tracer._raw)
        tracer.close()
        app.close()
    rows: list[tuple[float, ...]] = []
    for text, _sent, _names, verb, _thread, _extras in raw:
        found = batches(text) if verb == "Claims.cycle" else []
        if len(found) == 2:
            (a0, a1, a2, a3), (b0, b1, b2, b3) = found
            rows.append((a1 - a0, a2 - a1, a3 - a2, b0 - a3, b1 - b0, b2 - b1, b3 - b2))
    return rows


def main() -> None:
    options = parse_options(__doc__, runs=400)
    for _ in range(options.repeat):
        rows = one_run(options.runs)
        print(f"{len(rows)} two-batch cycles")
        for index, part in enumerate(PARTS):
            print(f"  {part}: median {1000 * statistics.median(row[index] for row in rows):.3f} ms")


if __name__ == "__main__":
    main()
