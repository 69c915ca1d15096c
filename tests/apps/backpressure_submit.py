"""A submitter process racing others at the admission ceiling (`tests.apps.backpressure`).

Usage: python -m tests.apps.backpressure_submit START_FILE --threads T --attempts A

Opens the store, touches `START_FILE.ready.<pid>`, waits for START_FILE, then
T threads each try A submits of `bp.gated` (one at a time) and the process
prints `{"accepted": [run ids...], "rejected": n}` as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

from tests.apps.backpressure import make_app
from tidegate import AdmissionRejected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("start_file")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--attempts", type=int, default=10)
    options = parser.parse_args(argv)
    start = Path(options.start_file)
    app = make_app(os.environ["TIDEGATE_DATABASE"])
    gated = app.tasks["bp.gated"]
    app.store.status_counts()  # open the store before the race
    Path(f"{start}.ready.{os.getpid()}").touch()
    give_up = time.monotonic() + 60
    while not start.exists():
        if time.monotonic() > give_up:
            print("start file never appeared", file=sys.stderr)
            return 2
        time.sleep(0.005)

    accepted: list[str] = []
    rejected = [0]
    lock = threading.Lock()
    errors: list[BaseException] = []

    def submitter() -> None:
        try:
            for _ in range(options.attempts):
                try:
                    handle = gated.submit(n=0)
                except AdmissionRejected:
                    with lock:
                        rejected[0] += 1
                else:
                    with lock:
                        accepted.append(handle.id)
        except BaseException as error:  # reported, and the exit code says so
            errors.append(error)

    threads = [threading.Thread(target=submitter) for _ in range(options.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    app.close()
    print(json.dumps({"accepted": accepted, "rejected": rejected[0], "errors": [repr(e) for e in errors]}))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
