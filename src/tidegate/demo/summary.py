"""What the demo measured, computed from the stored runs and rendered as tables.

Numbers come from the store (submitted, started and finished times, attempt
counts), not from the demo's own clock, so they describe what the workers
did; only the peak concurrency is sampled live, because the store keeps no
history of how many runs were running at once.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from statistics import fmean

from rich import box
from rich.table import Table
from rich.text import Text

from tidegate.domain.model import RunRecord, RunStatus


@dataclass(frozen=True)
class Summary:
    runs: list[RunRecord]
    expected: int
    capacity: int
    workers: int
    max_workers: int
    peak_running: int

    @property
    def by_status(self) -> Counter[RunStatus]:
        return Counter(run.status for run in self.runs)

    @property
    def all_completed(self) -> bool:
        return len(self.runs) == self.expected and self.by_status[RunStatus.COMPLETED] == self.expected

    @property
    def retries(self) -> int:
        """Each attempt after the first is one retry (one RunRetried event)."""
        return sum(run.attempt - 1 for run in self.runs)

    @property
    def wall_seconds(self) -> float:
        finished = [run.finished_at for run in self.runs if run.finished_at is not None]
        if not finished or not self.runs:
            return 0.0
        return max((max(finished) - min(run.submitted_at for run in self.runs)).total_seconds(), 1e-6)

    def mean_wait(self, prioritized: bool) -> float | None:
        """Seconds from submit to start, for first attempts (a retry restarts the clock)."""
        waits = [
            (run.started_at - run.submitted_at).total_seconds()
            for run in self.runs
            if run.started_at is not None and run.attempt == 1 and (run.priority > 0) == prioritized
        ]
        return fmean(waits) if waits else None


def totals_table(summary: Summary) -> Table:
    table = Table(box=box.ROUNDED, show_header=False, title="summary", title_justify="left", title_style="bold")
    table.add_column(style="dim", no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_row("runs by status", _by_status(summary))
    retried = sum(1 for run in summary.runs if run.attempt > 1)
    recovered = ", all recovered" if summary.all_completed else ""
    table.add_row("retries", f"{summary.retries} (on {retried} runs{recovered})")
    wall = summary.wall_seconds
    table.add_row("wall time", f"{wall:.2f}s (first submit to last finish)")
    table.add_row("throughput", f"{len(summary.runs) / wall:.0f} runs/s" if wall else "-")
    peak_style = "bold green" if summary.peak_running <= summary.capacity else "bold red"
    table.add_row(
        "peak running",
        Text.assemble(
            (f"{summary.peak_running}", peak_style),
            f" at once, capacity {summary.capacity} ({summary.workers} workers × {summary.max_workers})",
        ),
    )
    high, normal = summary.mean_wait(True), summary.mean_wait(False)
    if high is not None and normal is not None:
        table.add_row("mean wait", f"{_ms(high)} for priority runs (submitted last), {_ms(normal)} for the rest")
    return table


def tasks_table(summary: Summary) -> Table:
    table = Table(box=box.ROUNDED, title="by task", title_justify="left", title_style="bold")
    table.add_column("task", no_wrap=True)
    table.add_column("queue", no_wrap=True)
    table.add_column("runs", justify="right")
    table.add_column("completed", justify="right")
    table.add_column("retries", justify="right")
    table.add_column("mean run time", justify="right")
    for task in sorted({run.task for run in summary.runs}):
        runs = [run for run in summary.runs if run.task == task]
        durations = [
            (run.finished_at - run.started_at).total_seconds()
            for run in runs
            if run.started_at is not None and run.finished_at is not None
        ]
        completed = sum(1 for run in runs if run.status is RunStatus.COMPLETED)
        retries = sum(run.attempt - 1 for run in runs)
        table.add_row(
            task,
            runs[0].queue,
            str(len(runs)),
            Text(str(completed), style="green" if completed == len(runs) else "red"),
            Text(str(retries), style="yellow" if retries else "dim"),
            _ms(fmean(durations)) if durations else "-",
        )
    return table


def _by_status(summary: Summary) -> Text:
    """Every final status, even at zero: '0 failed' is the point of the demo."""
    statuses = summary.by_status
    line = Text()
    shown = [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED]
    shown += [status for status in (RunStatus.QUEUED, RunStatus.RUNNING) if statuses[status]]
    for index, status in enumerate(shown):
        count = statuses[status]
        good = status is RunStatus.COMPLETED and summary.all_completed
        style = "bold green" if good else ("bold red" if count and status is not RunStatus.COMPLETED else "")
        line.append(", " if index else "")
        line.append(f"{count} {status.value}", style=style)
    return line


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"
