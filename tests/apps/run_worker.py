"""Run a worker for `MODULE:APP` until stopped (or drained): the test suite's worker process.

Usage: python -m tests.apps.run_worker MODULE:APP --max-workers N [--drain]

It deliberately does not use the CLI, so the multi-process tests depend only
on the library API (`app.worker(...).run()`).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("target", help="MODULE:APP")
    parser.add_argument("--max-workers", type=int, default=4)
    parser.add_argument("--drain", action="store_true")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    module_name, _, attribute = options.target.partition(":")
    app = getattr(importlib.import_module(module_name), attribute or "app")
    app.worker(max_workers=options.max_workers, drain=options.drain).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
