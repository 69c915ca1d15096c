"""What every scenario needs: worker processes it can kill and freeze, a shared log, the store's facts.

Workers are real processes (`python -m chaos.worker`), each writing its stderr
to a file of its own. Every fault the driver injects is written to the same
log as the task executions (`kill`, `stop`, `cont` with the pid and the
monotonic time), so the history checker sees one timeline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chaos.apps import POOL, POOL_LEASE, POOL_LIMIT, make_app
from chaos.history import EventFacts, History, RunFacts
from tidegate import RunStatus

REPO_ROOT = Path(__file__).resolve().parent.parent
WORKER_ENV = {"TIDEGATE_LEASE_DURATION": "2s", "TIDEGATE_POLL_INTERVAL": "500ms"}


class Harness:
    """One scenario's database, log and worker processes; `close()` kills every worker left."""

    def __init__(self, url: str, folder: Path, env: dict[str, str] | None = None) -> None:
        self.url = url
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.log_path = folder / "history.jsonl"
        self.env = {**WORKER_ENV, **(env or {})}
        self.app = make_app(url)
        self.app.set_pool_limit(POOL, POOL_LIMIT, POOL_LEASE)
        self.workers: list[subprocess.Popen[bytes]] = []
        self.spawned = 0

    def note(self, kind: str, pid: int, **extra: Any) -> float:
        now = time.monotonic()
        line = json.dumps({"kind": kind, "pid": pid, "t": now, **extra}) + "\n"
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        return now

    def spawn(self, *, max_workers: int = 4, skew: float = 0.0) -> subprocess.Popen[bytes]:
        environment = {
            **os.environ,
            **self.env,
            "CHAOS_LOG": str(self.log_path),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        }
        command = [sys.executable, "-m", "chaos.worker", self.url, "--max-workers", str(max_workers)]
        if skew:
            command += ["--skew", str(skew)]
        with open(self.folder / f"worker-{self.spawned}.log", "wb") as output:
            process = subprocess.Popen(command, cwd=REPO_ROOT, env=environment, stdout=output, stderr=subprocess.STDOUT)
        self.spawned += 1
        self.workers.append(process)
        return process

    def kill(self, process: subprocess.Popen[bytes], *, storm: bool = True) -> None:
        """SIGKILL; the kill is logged once the process is gone (its executions end by then)."""
        alive = process.poll() is None
        if alive:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        self.note("kill", process.pid, storm=storm and alive)  # a process found dead ends its executions too
        if process in self.workers:
            self.workers.remove(process)

    def freeze(self, process: subprocess.Popen[bytes]) -> None:
        os.kill(process.pid, signal.SIGSTOP)
        self.note("stop", process.pid)

    def thaw(self, process: subprocess.Popen[bytes]) -> None:
        os.kill(process.pid, signal.SIGCONT)
        self.note("cont", process.pid)

    def entries(self) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        return [json.loads(line) for line in self.log_path.read_text().splitlines() if line.strip()]

    def unfinished(self) -> int:
        counts = self.app.store.status_counts()
        return sum(count for status, count in counts.items() if not status.finished)

    def wait_finished(self, timeout: float) -> bool:
        """Wait until no run is queued or running (restarting workers that died)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.unfinished() == 0:
                return True
            time.sleep(0.2)
        return False

    def history(self, submitted: list[str], limits: dict[str, int], innocents: Sequence[str] = ()) -> History:
        store = self.app.store
        runs = store.page_runs(limit=1_000_000)
        return History(
            entries=self.entries(),
            runs=[RunFacts(run.id, run.status.value, run.attempt, run.error) for run in runs],
            events={run.id: [EventFacts(e.type, e.metadata) for e in store.run_events(run.id)] for run in runs},
            submitted=submitted,
            limits=limits,
            held_slots=store.scope_usage(),
            innocents=innocents,
        )

    def status(self, run_id: str) -> RunStatus | None:
        record = self.app.store.get_run(run_id)
        return None if record is None else record.status

    def close_workers(self) -> None:
        for process in list(self.workers):
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)  # a frozen process must be thawed to die
            self.kill(process, storm=False)

    def close(self) -> None:
        self.close_workers()
        self.app.close()
