"""Tables that fit the terminal without breaking an identifier (issue 15 item 7).

Run ids, scope keys (`queue:external_api/customer_id=42`), queue, task and
worker names are meant to be copied, so no cell may wrap inside one: each
column is given at least the width of its longest word, identifier columns
never wrap at all, and when the terminal is too narrow for that the
descriptive columns (times, priority, notes) are left out, least useful
first, instead. Text wraps only between words. Scripts use `--json`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from tidegate.cli.terminal import visible

Cell = str | Text
LONGEST_KEPT = 60  # a longer word in a descriptive column (a URL in an error) may fold rather than drop columns
NARROWEST_FOLD = 12  # a descriptive column still too wide is narrowed to this at least, and folds inside words


@dataclass(frozen=True)
class Column:
    """A column; `drop` ranks the descriptive ones (1 is left out first), None is always shown."""

    header: str
    identifier: bool = False  # never wrapped
    drop: int | None = None
    options: dict[str, Any] = field(default_factory=dict)  # justify, style...


def _plain(cell: Cell) -> str:
    """A cell's text as the console will print it (control characters as escapes), to measure it."""
    return visible(cell.plain if isinstance(cell, Text) else cell)


def _longest_word(text: str) -> int:
    return max((cell_len(word) for word in text.split()), default=0)


def _min_width(column: Column, cells: Sequence[Cell]) -> int:
    """What the column needs so that nothing in it breaks mid-word (identifiers: not at all)."""
    texts = [_plain(cell) for cell in cells]
    if column.identifier:
        return max(
            [cell_len(column.header), *(max((cell_len(line) for line in t.splitlines()), default=0) for t in texts)]
        )
    longest = max([_longest_word(column.header), *(_longest_word(text) for text in texts)])
    return min(longest, LONGEST_KEPT)


def fitted_table(
    columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int, *, gap: int = 1, **table: Any
) -> Table:
    """A Rich table of `rows` within `width` columns, leaving out descriptive columns until it fits."""
    minimums = [_min_width(column, [row[index] for row in rows]) for index, column in enumerate(columns)]
    kept = list(range(len(columns)))

    def needed() -> int:
        return sum(minimums[index] for index in kept) + (len(kept) - 1) * (1 + gap) + gap

    for index in sorted((i for i, c in enumerate(columns) if c.drop is not None), key=lambda i: columns[i].drop or 0):
        if needed() <= width:
            break
        kept.remove(index)
    narrowed = _narrow_descriptive(columns, minimums, kept, needed() - width)
    result = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, gap, 0, 0), **table)
    for index in kept:
        column = columns[index]
        if column.identifier:
            result.add_column(column.header, no_wrap=True, min_width=minimums[index], **column.options)
        else:
            most = minimums[index] + gap if index in narrowed else None  # the padding counts in
            result.add_column(
                column.header, overflow="fold", min_width=minimums[index], max_width=most, **column.options
            )
    for row in rows:
        result.add_row(*(row[index] for index in kept))
    return result


def _narrow_descriptive(columns: Sequence[Column], minimums: list[int], kept: list[int], excess: int) -> set[int]:
    """Narrow the kept descriptive columns (widest first) by `excess` in all, so they fit the width;
    the columns narrowed. Rich measures a cell at least as wide as its longest word and crops what the
    table cannot give it, which silently drops characters from the middle of a folded cell: a column
    narrowed here is capped (max_width), so its cell folds inside the word and prints every character."""
    narrowed = set()
    for index in sorted((i for i in kept if not columns[i].identifier), key=lambda i: -minimums[i]):
        if excess <= 0:
            break
        cut = min(excess, max(0, minimums[index] - NARROWEST_FOLD))
        minimums[index] -= cut
        excess -= cut
        narrowed.add(index)
    return narrowed
