"""`cli/fit.py`: a table at any terminal width prints every character of every cell (issue 28 item 7).

A descriptive cell with a word longer than what the identifiers leave it (an event's JSON details at
80 columns) folds inside the word; it must never lose characters from its middle.
"""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.text import Text

from tidegate.cli.fit import fitted_table
from tidegate.cli.render import compact_metadata
from tidegate.cli.runs import EVENT_COLUMNS

DETAILS = compact_metadata({"blocked_by": [{"pool": "warehouse", "claimed": 2, "limit": 2, "slots": 1}], "attempt": 1})


@pytest.mark.parametrize("width", [60, 72, 80, 100, 140])
def test_a_long_detail_folds_with_every_character_kept(width: int) -> None:
    row = ["12:00:00.123", "+1.2s", Text("StepSlotWaiting"), Text("load_warehouse_rows[12]"), Text(DETAILS)]
    console = Console(width=width, no_color=True, record=True)
    console.print(fitted_table(EVENT_COLUMNS, [row], width))
    lines = console.export_text().splitlines()[2:]  # below the header and its rule
    start = lines[0].index("attempt=1")
    printed = "".join(line[start:].strip() for line in lines)
    assert printed.replace(" ", "") == DETAILS.replace(" ", "")  # was '…,"limit":2,"po":1}]' at 80
    assert "load_warehouse_rows[12]" in lines[0]  # the identifier stays whole
