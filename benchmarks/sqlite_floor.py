"""SQLite, the embedded default: the no-limit drain against a bare claim + complete loop (issue 29).

    python benchmarks/sqlite_floor.py [--repeat 4]

Alternates, --repeat times, two programs of `../shared/bench-peers/` on this machine:

- the floor, `sqlite/sqlite_claim.py --seconds 5`: a table of 100,000 rows, each cycle one
  claim and one completion, each its own transaction (stdlib sqlite3, WAL, synchronous=NORMAL,
  as tidegate opens its file);
- tidegate, `bench_tidegate.py w1free --backend sqlite`: W1 with no limit, 5,000 no-op runs
  submitted one call each, then one worker of 8 slots in the same process drains them.

Reported: the medians of each (cycles/s, runs/s) and their ratio, the aim (>= 0.4) beside it.
Both are single-process and CPU-bound, so the ratio holds across the machine's drift better than
either rate; still, compare only figures of one sitting. Set PEERS to the harness folder if it
is not at `../shared/bench-peers` beside the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from common import measured_with, median, print_table, write_markdown

HERE = Path(__file__).parent
PEERS = Path(os.environ.get("PEERS", HERE.parent.parent / "shared" / "bench-peers"))
AIM = 0.4
console = Console()


def bare_loop(folder: Path) -> float:
    """Cycles per second of the bare claim + complete loop."""
    command = [sys.executable, "sqlite/sqlite_claim.py", "--seconds", "5", "--db", str(folder / "claim.db")]
    output = subprocess.run(command, cwd=PEERS, check=True, capture_output=True, text=True, timeout=120).stdout
    match = re.search(r"cycles_per_s=(\d+)", output)
    if match is None:
        raise SystemExit(f"sqlite_claim.py printed no cycles_per_s: {output.strip()[-200:]}")
    return float(match.group(1))


def drain(folder: Path) -> float:
    """Runs per second of tidegate's W1 drain with no limit."""
    out = folder / "tidegate.jsonl"
    out.unlink(missing_ok=True)
    command = [sys.executable, "bench_tidegate.py", "w1free", "--backend", "sqlite", "--out", str(out)]
    subprocess.run(command, cwd=PEERS, check=True, capture_output=True, timeout=300)
    row = json.loads(out.read_text().splitlines()[-1])
    if row["completed"] != row["jobs"]:
        raise SystemExit(f"the drain completed {row['completed']} of {row['jobs']} runs")
    return float(row["drain_jobs_per_s"])


def listed(values: list[float]) -> str:
    return ", ".join(f"{value:,.0f}" for value in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=4)
    options = parser.parse_args()
    if not (PEERS / "sqlite" / "sqlite_claim.py").exists():
        raise SystemExit(f"no peers harness at {PEERS}: set PEERS to the bench-peers folder")
    loops: list[float] = []
    drains: list[float] = []
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tidegate-sqlite-floor-") as name:
        for rep in range(options.repeat):
            loads.append(os.getloadavg()[0])
            loops.append(bare_loop(Path(name)))
            drains.append(drain(Path(name)))
            console.print(f"[dim]rep {rep + 1}: loop {loops[-1]:,.0f} cycles/s, drain {drains[-1]:,.0f} runs/s[/]")
    ratio = median(drains) / median(loops)
    header = ["bare loop, cycles/s", "tidegate drain, runs/s", "drain / loop", "aim"]
    rows = [[f"{median(loops):,.0f}", f"{median(drains):,.0f}", f"{ratio:.2f}", f">= {AIM}"]]
    title = f"SQLite: the no-limit drain against the bare loop, medians of {options.repeat}"
    print_table(console, title, header, rows, ())
    notes = [
        measured_with("python benchmarks/sqlite_floor.py " + " ".join(sys.argv[1:])),
        "",
        f"Reps alternated, load average {min(loads):.1f}-{max(loads):.1f} at their starts. "
        f"Loop: {listed(loops)}; drain: {listed(drains)}.",
    ]
    path = write_markdown("sqlite_floor", "SQLite: the no-limit drain against the bare loop", header, rows, notes)
    console.print(f"written to {path}")


if __name__ == "__main__":
    main()
