"""Through PgBouncer in transaction mode vs a direct connection: enqueue and drain, as ratios.

    python benchmarks/pooler.py [--runs 5000] [--repeat 3]

Each repetition makes a fresh schema, then measures both paths in turn (their
order alternating between repetitions): enqueue one call per run (1,000
calls), and the drain of --runs no-op runs by one worker process (from the
first claim to the last completion as the database recorded them). The pooled
path is a private PgBouncer 1.18 (tests/pooler/pgbouncer.py) declared with
`?tidegate_pooler=transaction`, its wake-ups on the direct URL; a third path,
"stateless", declares the direct URL pooled, so what planning every statement
again costs is told apart from the pooler's hop. Results:
results/pooler.md (medians, and pooled / direct).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from tests.pooler.pgbouncer import PgBouncer  # noqa: E402

from common import fresh_database, median, parse_options, write_markdown  # noqa: E402
from throughput import SINGLE_SUBMITS, claim_window, make_app  # noqa: E402


def measure(url: str, direct: str, runs: int) -> tuple[float, float]:
    """(enqueue runs/s one call per run, drain runs/s of one worker process) on `url`."""
    import subprocess

    app = make_app(url)
    noop = next(iter(app.tasks.values()))
    single = noop.options(queue="single")
    started = time.perf_counter()
    for _ in range(SINGLE_SUBMITS):
        single.submit()
    enqueue = SINGLE_SUBMITS / (time.perf_counter() - started)
    for offset in range(0, runs, 1000):
        noop.submit_many([{}] * min(1000, runs - offset))
    app.close()
    env = {**os.environ, "TIDEGATE_DATABASE": url, "TIDEGATE_DATABASE_DIRECT": direct}
    if subprocess.run([sys.executable, str(HERE / "run_worker.py"), "64"], env=env, check=False).returncode:
        raise SystemExit("the worker process failed")
    first, last, completed = claim_window(direct)
    if completed != runs:
        raise SystemExit(f"expected {runs} completed runs, found {completed}")
    return enqueue, runs / (last - first)


PATHS = ("direct", "stateless", "pgbouncer")  # stateless: the direct URL declared pooled, no PgBouncer
# JIT off as the pooled path's server sessions have it (the PgBouncer's connect_query, docs/postgres-pooler.md:
# the role's setting in production); left on, the stateless drain compiled its plans and fell to 8 runs/s.
STATELESS = "%20-cjit%3Doff&tidegate_pooler=transaction"


def main() -> None:
    options = parse_options(__doc__, 5000)
    figures: dict[str, list[float]] = {}
    for rep in range(options.repeat):
        for path in PATHS[rep % 3 :] + PATHS[: rep % 3]:  # each path first in turn
            with fresh_database("postgres") as direct:
                schema = direct.rpartition("%3D")[2]
                bouncer = PgBouncer("127.0.0.1", 5432, "test", schema) if path == "pgbouncer" else None
                try:
                    url = bouncer.url if bouncer else direct + (STATELESS if path == "stateless" else "")
                    enqueue, drain = measure(url, direct, options.runs)
                finally:
                    if bouncer:
                        bouncer.stop()
            figures.setdefault(f"enqueue {path}", []).append(enqueue)
            figures.setdefault(f"drain {path}", []).append(drain)
            now = os.getloadavg()[0]
            print(f"rep {rep + 1} {path}: enqueue {enqueue:.0f}/s, drain {drain:.0f}/s, load {now:.1f}", flush=True)
    load = os.getloadavg()
    rows = []
    for what in ("enqueue", "drain"):
        plain, bare, through = (median(figures[f"{what} {path}"]) for path in PATHS)
        rows.append(
            [
                f"{what} (runs/s)",
                f"{plain:,.0f}",
                f"{bare:,.0f}",
                f"{through:,.0f}",
                f"{bare / plain:.2f}",
                f"{through / plain:.2f}",
            ]
        )
    notes = [
        f"Medians of {options.repeat} interleaved repetitions; enqueue is {SINGLE_SUBMITS:,} calls of one run,"
        f" drain is {options.runs:,} no-op runs by one worker process. Stateless: the direct URL declared"
        " `?tidegate_pooler=transaction` (nothing prepared or set, no PgBouncer): what statelessness costs"
        " without the pooler's hop. Load average"
        f" {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end (a shared 2-core machine: read the ratios).",
    ]
    header = ["figure", "direct", "stateless direct", "PgBouncer 1.18", "stateless / direct", "PgBouncer / direct"]
    written = write_markdown("pooler", "PostgreSQL through PgBouncer (transaction mode) vs direct", header, rows, notes)
    print(written.read_text())


if __name__ == "__main__":
    main()
