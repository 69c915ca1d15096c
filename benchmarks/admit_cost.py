"""The worker's decision alone: `admit` on a claim shaped like cost_of_limits' limited drain.

    python benchmarks/admit_cost.py [--base REF] [--reps 3]

320 candidates, each needing three loose scopes (global 1,000, a partition of 100 out of 10, a
tag value of 200 out of 10), capacity 64 and 256 ahead: every candidate is admitted, so each pays
the whole path. Pure Python, no database: microseconds per candidate, the median of 15 batches of
50 decisions, the base commit's tree (`git archive`) and this tree interleaved `--reps` times in
fresh processes, so the machine's drift hits both alike.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure() -> float:
    from tidegate import Concurrency, Partition, QueueConfig, RunQueueConfig, TagConcurrencyLimit
    from tidegate.domain.admission import Candidate, LocalUsage, admit
    from tidegate.domain.scopes import Rules

    rules = Rules(
        RunQueueConfig(
            max_concurrent_runs=1000, tag_concurrency_limits=[TagConcurrencyLimit("tenant", 200, per_unique_value=True)]
        ),
        {"cost": QueueConfig("cost", Concurrency(global_limit=100, partition=Partition(by_args=["customer"])))},
        {},
        frozenset(),
    )
    found = [
        Candidate(f"r{i:05d}", "t", "cost", f"customer=c{i % 10}", {"tenant": f"t{i % 10}"}, 0, float(i))
        for i in range(320)
    ]
    local = LocalUsage()
    assert len(admit(found, {}, rules, local, 64, None, None, 0.0, 256).admitted) == len(found)
    batches = []
    for _ in range(15):
        started = time.perf_counter()
        for _ in range(50):
            admit(found, {}, rules, local, 64, None, None, 0.0, 256)
        batches.append((time.perf_counter() - started) / 50 / len(found) * 1e6)
    return statistics.median(batches)


def in_process(src: Path) -> float:
    command = [sys.executable, __file__, "--child"]
    output = subprocess.run(command, env={"PYTHONPATH": str(src)}, check=True, capture_output=True, text=True)
    return float(output.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="HEAD")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(measure())
        return
    with tempfile.TemporaryDirectory(prefix="tidegate-admit-") as folder:
        command = ["git", "-C", str(ROOT), "archive", options.base, "src"]
        archive = subprocess.run(command, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
        figures: dict[str, list[float]] = {"base": [], "this tree": []}
        for _ in range(options.reps):
            figures["base"].append(in_process(Path(folder) / "src"))
            figures["this tree"].append(in_process(ROOT / "src"))
    base, head = (statistics.median(values) for values in figures.values())
    print(f"admit, us per candidate: base {options.base} {base:.2f}, this tree {head:.2f}, ratio {head / base:.2f}")


if __name__ == "__main__":
    main()
