"""Step intervals in a side file, written from any process: `start|end|abandoned <step> <n> <t>`.

Steps may run in other processes (loky workers, worker processes), so they
record to a file passed as an argument (never through the environment: a
reused process pool keeps the environment it started with). Each line is one
O_APPEND write; `t = time.monotonic()` is one clock for every process on the
machine. This module imports nothing of tidegate, so a fresh pool process
that unpickles a step referring to it starts fast.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

Entry = tuple[str, str, int, float]
Interval = tuple[float, float]


def log_line(path: str, kind: str, step: str, n: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{kind} {step} {n} {time.monotonic():.6f}\n".encode())
    finally:
        os.close(fd)


def read_log(path: Path) -> list[Entry]:
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        if line.strip():
            kind, step, n, at = line.split()
            entries.append((kind, step, int(n), float(at)))
    return entries


def intervals(entries: Iterable[Entry], step: str, open_until: float | None = None) -> list[Interval]:
    """Start-to-end (or -abandoned) intervals of `step`, in start order; one still open ends at `open_until`."""
    open_: dict[int, list[float]] = {}
    done: list[Interval] = []
    for kind, name, n, at in entries:
        if name != step:
            continue
        if kind == "start":
            open_.setdefault(n, []).append(at)
        elif open_.get(n):
            done.append((open_[n].pop(0), at))
    if open_until is not None:
        done.extend((start, open_until) for starts in open_.values() for start in starts)
    return sorted(done)
