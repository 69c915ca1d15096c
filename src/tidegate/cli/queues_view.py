"""The `queues` table of `tidegate limits list`: each declared queue's partitioning and limits.

Kept apart from limits.py (the scopes and overrides) so each module stays one
job; fitted to the terminal like every table (`cli/fit.py`).
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from tidegate.cli.fit import Cell, Column, fitted_table
from tidegate.cli.render import stdout
from tidegate.cli.scopes import limit_text
from tidegate.domain.scopes import Rules
from tidegate.engine.operators.limit_table import natural_key, partition_text

QUEUE_COLUMNS = [
    Column("queue", identifier=True, options={"style": "bold"}),
    Column("partitioned by"),
    *(Column(header, options={"justify": "right"}) for header in ("global limit", "local limit", "max_workers")),
    Column("ordering", drop=1),
    Column("state", identifier=True),
]


def queues_table(rules: Rules) -> Table:
    rows: list[list[Cell]] = []
    for name in sorted(rules.queues, key=natural_key):
        config = rules.queues[name]
        limit = rules.queue_limit(name, "")
        live = f"queue:{name}" in rules.overrides
        rows.append(
            [
                Text(name, style="bold"),
                Text(
                    partition_text(config.concurrency.partition) or "-",
                    style="" if config.concurrency.partition.enabled else "dim",
                ),
                Text(
                    limit_text(limit) + (" (live)" if live else ""),
                    style="magenta" if live else ("dim" if limit is None else ""),
                ),
                dim_none(config.concurrency.local_limit),
                dim_none(config.max_workers),
                config.ordering,
                Text("paused", style="bold yellow") if rules.is_paused(name) else Text("open", style="dim"),
            ]
        )
    return fitted_table(
        QUEUE_COLUMNS,
        rows,
        stdout.width,
        title="queues",
        title_justify="left",
        title_style="bold",
        caption="local limit and max_workers are per worker; a concurrency key is its own partition",
        caption_justify="left",
        caption_style="dim",
    )


def dim_none(value: int | None) -> Text:
    return Text(limit_text(value), style="dim" if value is None else "")
