"""What the demo measured, computed from the stored runs and rendered as tables.

Numbers come from the store (submitted, started and finished times, attempt
counts, claim and release events), not from the demo's own clock, so they
describe what the workers did. The most runs holding each limited scope at
once is replayed from events (`demo.concurrency`); the "peak running" line is
sampled live, as a cross-check that needs no replay.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean

from rich import box
from rich.table import Table
from rich.text import Text

from tidegate.cli.scopes import slot_cells
from tidegate.demo.concurrency import ScopeTally
from tidegate.domain.model import RunRecord, RunStatus


@dataclass(frozen=True)
class Summary:
    runs: list[RunRecord]
    expected: int
    capacity: int
    workers: int
    max_workers: int
    peak_running: int
    tallies: Sequence[ScopeTally] = ()

    @property
    def limits_kept(self) -> bool:
        return all(item.kept for item in self.tallies)

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
    # At 80 columns or in a pipe the values wrap between words; nothing is cut off ("…").
    table.add_column(style="dim", no_wrap=True, min_width=len("runs by status"))
    table.add_column(overflow="fold")
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


def limits_table(summary: Summary, width: int = 100) -> Table:
    """Per limited scope: the most runs that ever held it at once, next to its limit."""
    table = Table(
        box=box.ROUNDED,
        title="limits kept (most runs, or a pool's step slots, held at once, from the events)",
        title_justify="left",
        title_style="bold",
    )
    table.add_column("scope", no_wrap=True)  # a scope key to copy: never wrapped
    table.add_column("max/limit", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)  # the max as slot cells: a full row is a limit that bound
    table.add_column("runs", justify="right", no_wrap=True)
    table.add_column("held back", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    cells = 12 if width >= 100 else 6
    for item in summary.tallies:
        table.add_row(
            item.scope,
            Text(f"{item.max_seen}/{item.limit}", style="bold" if item.kept else "bold red"),
            slot_cells(item.max_seen, item.limit, width=cells),
            str(item.runs),
            Text(str(item.held_back) if item.held_back else "-", style="yellow" if item.held_back else "dim"),
            Text("✓", style="bold green") if item.kept else Text("✗ exceeded", style="bold red"),
        )
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
