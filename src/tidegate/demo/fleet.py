"""The demo's worker processes, started and stopped the way an operator would.

Each worker is `python -m tidegate worker tidegate.demo.tasks:app` in its own
process, so the demo exercises the real CLI, cross-process wake-ups and
graceful SIGTERM shutdown rather than threads inside one interpreter.
A worker's first stdout line is its startup line: reading it is how we know
it is serving. Its logs go to a file, shown if it dies.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tidegate.bootstrap import DATABASE_ENV
from tidegate.domain.errors import TidegateError

TASKS = "tidegate.demo.tasks:app"


class DemoError(TidegateError):
    """The demo could not go on (a worker died, nothing progressed)."""


@dataclass
class WorkerProcess:
    number: int
    process: subprocess.Popen[str]
    log_path: Path
    log: IO[str]
    ready_line: str = ""

    def log_tail(self, lines: int = 5) -> str:
        self.log.flush()
        text = self.log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        return " | ".join(text[-lines:]) if text else "(no output)"


@dataclass
class Fleet:
    database: str
    count: int
    max_workers: int
    log_dir: Path
    workers: list[WorkerProcess] = field(default_factory=list)

    @property
    def capacity(self) -> int:
        return self.count * self.max_workers

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, DATABASE_ENV: self.database, "PYTHONUNBUFFERED": "1"}
        for number in range(1, self.count + 1):
            log_path = self.log_dir / f"demo-worker-{number}.log"
            log = log_path.open("w", encoding="utf-8")
            # The database goes in the environment, not argv: a URL's password would show in `ps`.
            command = [sys.executable, "-m", "tidegate", "worker", TASKS, "--max-workers", str(self.max_workers)]
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
            self.workers.append(WorkerProcess(number, process, log_path, log))

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        for worker in self.workers:
            assert worker.process.stdout is not None
            remaining = max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([worker.process.stdout], [], [], remaining)
            line = worker.process.stdout.readline() if readable else ""
            if not line:
                why = "did not start in time" if worker.process.poll() is None else "exited"
                raise DemoError(f"worker {worker.number} {why}: {worker.log_tail()} (log: {worker.log_path})")
            worker.ready_line = line.strip()

    def check_alive(self) -> None:
        for worker in self.workers:
            code = worker.process.poll()
            if code is not None:
                raise DemoError(
                    f"worker {worker.number} exited with code {code}: {worker.log_tail()} (log: {worker.log_path})"
                )

    def stop(self, timeout: float = 30.0) -> list[int | None]:
        """SIGTERM every worker (they finish in-flight runs), wait, and kill any straggler."""
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        codes: list[int | None] = []
        for worker in self.workers:
            try:
                codes.append(worker.process.wait(max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
                codes.append(None)
            if worker.process.stdout is not None:
                worker.log.write(worker.process.stdout.read())
                worker.process.stdout.close()
            worker.log.close()
        return codes
