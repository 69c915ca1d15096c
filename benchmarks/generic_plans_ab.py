"""Lever 1 of docs/postgres-profile.md, before and after, interleaved in one sitting.

    python benchmarks/generic_plans_ab.py --base <git ref> [--reps 3]

Runs the PostgreSQL benchmarks below once per rep for each of two trees of
tidegate: A, the source of `--base` (exported with `git archive` to a
temporary folder and put first on PYTHONPATH, which every benchmark's worker
processes inherit), and B, this checkout. The order alternates rep by rep
(A B, B A, ...) so the machine's drift hits both alike. Each benchmark writes
its own table in benchmarks/results/; every number of that table is kept per
run, and the original file is put back at the end. Reported: the median of
each number per tree and the ratio B / A. Writes
benchmarks/results/generic_plans_ab.md.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import measured_with, write_markdown

HERE = Path(__file__).parent
RESULTS = HERE / "results"
ROOT = HERE.parent
BENCHMARKS = {
    "throughput": ["--backends", "postgres", "--repeat", "1", "--runs", "5000"],
    "cost_of_limits": ["--backends", "postgres", "--repeat", "1", "--runs", "5000"],
    "blocked_backlog": ["--backends", "postgres", "--repeat", "1", "--sizes", "0,100000", "--probes", "5"],
    "handoff": ["--backends", "postgres", "--repeat", "1", "--runs", "200", "--idle-seconds", "3"],
}
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
LABELS = {"backend", "set-up", "statistics", "blocked backlog"}  # the columns that name a row, not measure it


def export(ref: str, folder: Path) -> Path:
    """The `src` folder of `ref`, unpacked into `folder`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder / "src"


def numbers(markdown: str) -> dict[tuple[str, str], float]:
    """Every number of the file's tables, keyed by (row label, column header): the first number of a cell.

    The row label joins the cells of the LABELS columns (e.g. backend / set-up)."""
    found: dict[tuple[str, str], float] = {}
    header: list[str] = []
    for line in markdown.splitlines():
        if not line.startswith("|"):
            header = []
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not header:
            header = cells
        elif not set("".join(cells)) <= set("-: "):
            label = " / ".join(cell for column, cell in zip(header, cells, strict=False) if column in LABELS)
            for column, cell in zip(header, cells, strict=False):
                match = NUMBER.search(cell)
                if match and column not in LABELS:
                    found[(label, column)] = float(match.group().replace(",", ""))
    return found


def run(name: str, source: Path | None, log: Path) -> dict[tuple[str, str], float]:
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
    with log.open("a") as out:
        command = [sys.executable, str(HERE / f"{name}.py"), *BENCHMARKS[name]]
        subprocess.run(command, env=env, stdout=out, stderr=out, check=True, cwd=HERE)
    return numbers((RESULTS / f"{name}.md").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="git ref of tree A")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--only", default=",".join(BENCHMARKS))
    options = parser.parse_args()
    names = options.only.split(",")
    originals = {name: (RESULTS / f"{name}.md").read_text() for name in names}
    samples: dict[str, dict[str, list[dict[tuple[str, str], float]]]] = {n: {"A": [], "B": []} for n in names}
    with tempfile.TemporaryDirectory(prefix="tidegate-ab-") as folder:
        base = export(options.base, Path(folder))
        log = Path(folder) / "log.txt"
        try:
            for rep in range(options.reps):
                for name in names:
                    for tree in ("A", "B") if rep % 2 == 0 else ("B", "A"):
                        print(f"rep {rep + 1}: {name} {tree}", flush=True)
                        samples[name][tree].append(run(name, base if tree == "A" else None, log))
        finally:
            for name, text in originals.items():
                (RESULTS / f"{name}.md").write_text(text)
            print(log.read_text()[-3000:])
    rows = []
    for name in names:
        a_runs, b_runs = samples[name]["A"], samples[name]["B"]
        for key in a_runs[0]:
            a = statistics.median(run[key] for run in a_runs if key in run)
            b = statistics.median(run[key] for run in b_runs if key in run)
            ratio = f"{b / a:.2f}" if a else "-"
            rows.append([name, key[0], key[1], f"{a:,.3g}", f"{b:,.3g}", ratio])
    notes = [
        measured_with(f"python benchmarks/generic_plans_ab.py --base {options.base} --reps {options.reps}"),
        "",
        "A: tidegate at the base ref; B: this tree. Interleaved rep by rep (A B, B A, ...), medians of",
        f"{options.reps} runs each; the machine is shared with other work, so read the ratios. Arguments:",
        *(f"- `{name}.py {' '.join(BENCHMARKS[name])}`" for name in names),
    ]
    path = write_markdown(
        "generic_plans_ab",
        "Generic plans (lever 1): every figure of the benchmarks, A = before, B = after",
        ["benchmark", "row", "column", "A median", "B median", "B / A"],
        rows,
        notes,
    )
    print(path.read_text())


if __name__ == "__main__":
    main()
