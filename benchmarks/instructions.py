"""Instructions per submit and per drained run, base commit against this tree (issues 24/29).

    .venv/bin/python benchmarks/instructions.py [--base 38a4a06] [--runs 1000] [--backends sqlite,postgres]

Load-independent: each figure is counted by `valgrind --tool=callgrind` (instructions of the client
process only; the PostgreSQL server is another process) as (I(runs) - I(0)) / runs, so the fixed cost
of start-up, imports and declarations cancels out. Measured:

- submit: one app on a fresh database, one task declared and submitted once (declarations and
  connections made), then `runs` single `submit()` calls;
- submit_unique: the same with `unique=Unique(by_args=["i"])` on the task, each submit a new key;
- submit_tx: the plain submit in the caller's transaction (`options(connection=...)`, one commit per
  submit), on the caller's own connection as `benchmarks/submit_paths.py` opens it (issue 26);
- drain: `runs` no-op runs queued by a helper process (not counted), then one in-process worker
  (`max_workers=8, drain=True`, no limit; again with a queue limit of 4; and again with a rate that
  never binds, `Rate(1_000_000, "1s")`: issue 25) claims and runs them all.

The base tree comes from `git archive <base>` into a temporary folder and runs with this venv
(`PYTHONPATH=<base>/src`), so both sides use the same interpreter and libraries. Callgrind runs a
Python process about 50x slower: a sitting takes several minutes. A drain's background threads
(lease renewal, heartbeats) tick by the wall clock, so its count carries some noise (about 1 %);
the submit count repeats to a few hundred instructions.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
KINDS = ("submit", "submit_unique", "submit_tx", "drain", "drain_limit4", "drain_rate")


def child(kind: str, url: str, runs: int) -> None:
    """The counted process (or, for `fill`, the helper that queues a drain's runs)."""
    import tidegate

    app = tidegate.App(url)
    limit = 4 if kind in ("drain_limit4", "fill_limit4") else None
    rate = tidegate.Rate(limit=1_000_000, per="1s") if kind in ("drain_rate", "fill_rate") else None
    app.queue("work", concurrency=tidegate.Concurrency(global_limit=limit) if limit else None, rate=rate)

    unique = tidegate.Unique(by_args=["i"]) if kind == "submit_unique" else None

    @app.task(queue="work", name="noop", unique=unique)
    async def noop(i: int = 0) -> None:
        """Zero work: the count is all tidegate."""

    if kind == "submit_tx":
        from submit_paths import _connect

        connection = _connect(url)
        in_transaction = noop.options(connection=connection)
        for index in range(-1, runs):
            in_transaction.submit(i=index)
            connection.commit()
        connection.close()
    elif kind.startswith("submit"):
        noop.submit(i=-1)
        for index in range(runs):
            noop.submit(i=index)
    elif kind.startswith("fill"):
        noop.submit_many([{"i": i} for i in range(runs)])
    else:
        app.worker(queues=["work"], max_workers=8, drain=True).run()
    app.close()


def counted(src: Path, kind: str, url: str, runs: int) -> int:
    """Instructions of one child process under callgrind."""
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONHASHSEED": "0"}
    script = str(Path(__file__).resolve())
    if kind.startswith("drain"):
        fill = kind.replace("drain", "fill")
        subprocess.run([sys.executable, script, "--child", fill, url, str(runs)], env=env, check=True)
    with tempfile.TemporaryDirectory(prefix="tidegate-callgrind-") as folder:
        out = Path(folder) / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
        subprocess.run(
            [*command, script, "--child", kind, url, str(runs)],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        match = re.search(r"^summary:\s+(\d+)", out.read_text(errors="replace"), re.MULTILINE)
        if match is None:
            raise SystemExit(f"no summary line in {out}")
        return int(match.group(1))


def per_run(src: Path, backend: str, kind: str, runs: int) -> float:
    from common import fresh_database

    counts = []
    for n in (0, runs):
        with fresh_database(backend) as url:
            counts.append(counted(src, kind, url, n))
    return (counts[1] - counts[0]) / runs


def tree_of(commit: str, folder: Path) -> Path:
    """The `src` folder of `commit`, unpacked into `folder`."""
    folder.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "src"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder / "src"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="38a4a06")
    parser.add_argument("--head", default=None, help="a commit to measure instead of this working tree")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--child", nargs=3, metavar=("KIND", "URL", "RUNS"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        kind, url, runs = options.child
        child(kind, url, int(runs))
        return
    load = os.getloadavg()[0]
    head = options.head or "this tree"
    print(f"instructions per run, base {options.base} vs {head}, {options.runs} runs, load average {load:.2f}")
    header = ["backend", "measure", f"base ({options.base})", "head", "head / base"]
    print("| " + " | ".join(header) + " |\n|---|---|---:|---:|---:|")
    rows = []
    with tempfile.TemporaryDirectory(prefix="tidegate-base-") as folder:
        trees = {
            "base": tree_of(options.base, Path(folder) / "base"),
            "head": ROOT / "src" if options.head is None else tree_of(options.head, Path(folder) / "head"),
        }
        for backend in options.backends.split(","):
            for kind in options.kinds.split(","):
                figures = {side: per_run(src, backend, kind, options.runs) for side, src in trees.items()}
                ratio = figures["head"] / figures["base"]
                rows.append(
                    [backend, f"instr/{kind}", f"{figures['base']:,.0f}", f"{figures['head']:,.0f}", f"{ratio:.3f}"]
                )
                print("| " + " | ".join(rows[-1]) + " |", flush=True)
    from common import measured_with, write_markdown  # beside this script, as every benchmark imports it

    command = f"benchmarks/instructions.py --base {options.base} --runs {options.runs} --backends {options.backends}"
    notes = [
        measured_with(command) + f" Load average {load:.2f} (instruction counts do not depend on it).",
        "",
        "Each figure is (I(runs) - I(0)) / runs of `valgrind --tool=callgrind` over the client process",
        f"(head: {head}). See the script's docstring for what is counted.",
    ]
    path = write_markdown("instructions", "Instructions per submit and per drained run", header, rows, notes)
    print(f"written to {path}")


if __name__ == "__main__":
    main()
