"""CPU per single-run submit, direct vs stateless (pooled, nothing prepared): a figure the load leaves alone.

    python benchmarks/submit_cpu.py [--calls 1000] [--repeat 3]

On a shared machine a submit's wall time is mostly its wait for a core, so
the rates of benchmarks/pooler.py move with the load. The CPU a submit costs
does not: the server backend's (its `/proc/<pid>/schedstat` run time, found
by a unique `application_name`, so the database must be on this machine)
and the client's (`time.process_time`). The stateless path is the direct URL
declared `?tidegate_pooler=transaction` (JIT off, as pooler.py's). To compare
two checkouts, run this file with each checkout's `src` first on PYTHONPATH.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

HERE = Path(__file__).parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import psycopg  # noqa: E402

from common import PG_SERVER, fresh_database, median, parse_options  # noqa: E402
from throughput import make_app  # noqa: E402

PATHS = ("direct", "stateless")
WARM_UP = 100  # submits before measuring: the first read the ceilings and plan the statements


def backend_ns(name: str) -> int:
    """CPU time run so far by the server backends whose application_name is `name`."""
    with psycopg.connect(PG_SERVER, autocommit=True) as connection:
        rows = connection.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,))
        pids = [row[0] for row in rows]
    return sum(int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) for pid in pids)


def measure(direct: str, path: str, calls: int) -> tuple[float, float]:
    """(server µs, client µs) of CPU per single-run submit on `path`."""
    name = f"submit_cpu_{uuid.uuid4().hex[:8]}"
    options = "%20-cjit%3Doff" if path == "stateless" else ""
    pooled = "&tidegate_pooler=transaction" if path == "stateless" else ""
    app = make_app(f"{direct}{options}&application_name={name}{pooled}")
    single = next(iter(app.tasks.values())).options(queue="single")
    try:
        for _ in range(WARM_UP):
            single.submit()
        server, client = backend_ns(name), time.process_time()
        for _ in range(calls):
            single.submit()
        return (backend_ns(name) - server) / calls / 1e3, (time.process_time() - client) / calls * 1e6
    finally:
        app.close()


def main() -> None:
    options = parse_options(__doc__, None, lambda parser: parser.add_argument("--calls", type=int, default=1000))
    figures: dict[str, list[tuple[float, float]]] = {path: [] for path in PATHS}
    for rep in range(options.repeat):
        for path in PATHS[rep % 2 :] + PATHS[: rep % 2]:
            with fresh_database("postgres") as direct:
                server, client = measure(direct, path, options.calls)
            figures[path].append((server, client))
            load = os.getloadavg()[0]
            print(f"rep {rep + 1} {path}: server {server:.0f} µs, client {client:.0f} µs, load {load:.1f}")
    totals = {path: median([server + client for server, client in values]) for path, values in figures.items()}
    for path, values in figures.items():
        server = median([value[0] for value in values])
        print(f"{path}: server {server:.0f} µs, client {median([value[1] for value in values]):.0f} µs per submit")
    print(f"CPU per submit, direct / stateless: {totals['direct'] / totals['stateless']:.2f}")


if __name__ == "__main__":
    main()
