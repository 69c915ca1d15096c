"""The demo's live view: progress, the limits at work, and one blocked run explained.

Everything shown is read from the store a few times a second through the
engine's operator services, as an operator's tools read it: run counts
(`runs.status_counts`), the slots in use (`limits.scope_usage`, the sum of holder rows), the
rules, the queued shapes (what holds queued runs back now, as `queues.blocked` tallies them),
the queue in claim order (`queues.claim_order`) and `why.explain`.
Scope rows appear once first seen and then stay, in a fixed order, so the
view does not jump around while it refreshes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from rich import box
from rich.console import Group, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from tidegate.bootstrap import Store
from tidegate.cli.scopes import blocking_text, scope_limit, slot_cells, usage_text
from tidegate.domain.blocking import tally
from tidegate.domain.model import FINISHED_STATUSES, RunStatus
from tidegate.domain.scopes import GLOBAL, Rules
from tidegate.engine.operators import limits, queues, runs
from tidegate.engine.operators.limit_table import natural_key
from tidegate.engine.operators.why import explain

MAX_ROWS = 14
WHY_EVERY = 1.0  # seconds between two `queue why` samples: often enough to follow, calm enough to read


@dataclass
class Sample:
    """One read of the store."""

    counts: dict[RunStatus, int]
    usage: dict[str, int]
    rules: Rules
    held_back: Mapping[str, int]  # queued runs the scope holds back now
    needed: set[str]  # the limited scopes queued runs will need

    @property
    def finished(self) -> int:
        return sum(self.counts[status] for status in FINISHED_STATUSES)


def read_sample(store: Store) -> Sample:
    rules, shapes = limits.rules(store), queues.queued_shapes(store)
    usage = limits.scope_usage(store)
    needed = {need.key for shape in shapes for need in rules.scopes_for(shape.queue, shape.partition, shape.tags)}
    return Sample(runs.status_counts(store), usage, rules, tally(shapes, rules, usage).per_scope, needed)


@dataclass
class LiveView:
    total: int
    capacity: int
    progress: Progress = field(init=False)
    sample: Sample | None = None
    why: RenderableType | None = None
    seen: set[str] = field(default_factory=lambda: {GLOBAL})
    _why_at: float = 0.0

    def __post_init__(self) -> None:
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]runs"),
            BarColumn(bar_width=36),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
        )
        self._bar = self.progress.add_task("runs", total=self.total, detail="")

    def update(self, store: Store, sample: Sample) -> None:
        self.sample = sample
        counts = sample.counts
        detail = (
            f"running [cyan]{counts[RunStatus.RUNNING]:>3}[/]/{self.capacity}  "
            f"queued [yellow]{counts[RunStatus.QUEUED]:>4}[/]"
        )
        self.progress.update(self._bar, completed=sample.finished, detail=detail)
        self.seen |= {
            scope
            for scope in (*sample.usage, *sample.held_back, *sample.needed)
            if scope_limit(sample.rules, scope) is not None
        }
        now = time.monotonic()
        if not counts[RunStatus.QUEUED]:
            self.why = None
        elif now - self._why_at >= WHY_EVERY:
            self._why_at = now
            self.why = sample_why(store)

    def __rich__(self) -> RenderableType:
        parts: list[RenderableType] = [self.progress]
        if self.sample is not None:
            parts.append(scopes_table(self.sample, self.seen))
        if self.why is not None:
            parts.append(self.why)
        return Group(*parts)


def scopes_table(sample: Sample, seen: set[str]) -> Table:
    rows = []
    for scope in seen:
        limit = scope_limit(sample.rules, scope)
        if limit is not None:
            rows.append((scope, sample.usage.get(scope, 0), limit, sample.held_back.get(scope, 0)))
    hidden = 0
    if len(rows) > MAX_ROWS:  # keep the busiest, still shown in a fixed order
        rows.sort(key=lambda row: (row[0] != GLOBAL, -row[1] / row[2], -row[3]))
        hidden, rows = len(rows) - MAX_ROWS, rows[:MAX_ROWS]
    rows.sort(key=lambda row: (row[0] != GLOBAL, not row[0].startswith("queue:"), natural_key(row[0])))
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        title="limits at work",
        title_justify="left",
        title_style="bold",
        caption=f"and {hidden} more busy scopes" if hidden else None,
        caption_justify="left",
        caption_style="dim",
    )
    table.add_column("scope", no_wrap=True, overflow="ellipsis", max_width=40)
    table.add_column("slots held", no_wrap=True)
    table.add_column("running", justify="right", no_wrap=True)
    table.add_column("queued behind it", justify="right", no_wrap=True)
    for scope, used, limit, held_back in rows:
        table.add_row(
            scope,
            slot_cells(used, limit),
            usage_text(used, limit),
            Text(str(held_back) if held_back else "-", style="yellow" if held_back else "dim"),
        )
    return table


def sample_why(store: Store) -> RenderableType | None:
    """`tidegate queue why` for a queued run that a limit holds back, in two lines.

    The first such run in claim order, preferring one held back by something
    narrower than the global cap: a partition or a tenant is the telling case.
    """
    waiting, _ = queues.claim_order(store, None, limit=200)
    queued = [entry for entry in waiting if entry.verdict.blocking]
    queued.sort(key=lambda entry: [check.scope for check in entry.verdict.blocking] == [GLOBAL])  # stable: claim order
    for run in (entry.run for entry in queued[:5]):
        explanation = explain(store, run.id)
        if explanation.run.status is not RunStatus.QUEUED or not explanation.blocking:
            continue  # claimed, or freed, since the list was read
        first = Text.assemble(
            ("queue why ", "bold"),
            (run.id, "bold"),
            " (",
            (run.task, "cyan"),
            f", position {explanation.position} of {explanation.queued_in_queue} in {run.queue})",
        )
        first.no_wrap, first.overflow = True, "ellipsis"
        if len(explanation.blocking) > 1:
            first.append(f" · {len(explanation.blocking)} limits full", style="dim")
        check = next((c for c in explanation.blocking if c.scope != GLOBAL), explanation.blocking[0])
        second = Text("  blocked by ", no_wrap=True, overflow="ellipsis")
        second.append_text(blocking_text(check, explanation.holders.get(check.scope, []), max_holders=3))
        return Group(first, second)
    return None
