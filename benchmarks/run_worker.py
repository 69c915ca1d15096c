"""A worker process for the benchmarks: `python benchmarks/run_worker.py MAX_WORKERS`.

It drains the `bench` queue and exits, so the benchmark can time it.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_app import app

if __name__ == "__main__":
    app.worker(queues=["bench"], max_workers=int(sys.argv[1]), drain=True).run()
