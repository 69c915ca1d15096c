"""The chaos suite's server-crash helpers: finding a process's children, telling a dead (or
zombie) pid from a live one, and counting WAL replays in a server log."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from chaos.cluster import RECOVERY_LINE, alive, children_of, recoveries_in


def test_children_of_finds_a_spawned_child_and_alive_tells_it_from_a_dead_one() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in children_of(os.getpid())
        assert alive(child.pid)
        child.kill()
        # Killed but not yet reaped: a zombie, which holds no resources and counts as gone.
        deadline = time.monotonic() + 5
        while alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not alive(child.pid)
    assert child.pid not in children_of(os.getpid())


def test_recoveries_are_counted_from_the_server_log() -> None:
    log = "\n".join(
        [
            "LOG:  database system is ready to accept connections",
            f"LOG:  {RECOVERY_LINE}",
            "LOG:  redo starts at 0/1A2B3C4",
            "LOG:  database system was shut down at 2026-11-27 20:00:00 UTC",
            f"LOG:  {RECOVERY_LINE}",
        ]
    )
    assert recoveries_in(log) == 2
    assert recoveries_in("LOG:  database system is ready to accept connections") == 0
