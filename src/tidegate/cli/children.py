"""`runs show`'s children table: the runs a run triggered, in call order.

A module of its own so that the rest of `cli/runs.py` stays with its owner;
it renders `Store.run_children` and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.table import Table
from rich.text import Text

from tidegate.cli.render import status_text
from tidegate.domain.children import ChildRecord


def children_table(children: Sequence[ChildRecord]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="children", title_justify="left", title_style="bold")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("run", no_wrap=True)
    table.add_column("task", no_wrap=True)
    table.add_column("queue", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("awaited", no_wrap=True)
    for child in children:
        table.add_row(
            str(child.index),
            # a unique child whose key another run held: that run stands for it (docs/submitting.md)
            Text.assemble(child.id, (" (linked)", "dim")) if child.linked else child.id,
            child.task,
            child.queue,
            status_text(child.status),
            Text("yes" if child.awaited else "no (fire and forget)", style="" if child.awaited else "dim"),
        )
    return table
