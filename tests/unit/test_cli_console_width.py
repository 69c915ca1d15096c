"""The CLI's consoles are made at import: their width must follow COLUMNS (or the terminal) at each
print, not the COLUMNS of the moment of import (pytest-xdist's workers import with COLUMNS=80, and
every CLI test then wrapped at 80 whatever width it asked for)."""

from __future__ import annotations

import io

import pytest
from rich.table import Table

from tidegate.cli.terminal import TerminalConsole


def _table_lines(console: TerminalConsole) -> list[str]:
    table = Table("name", "detail")
    table.add_row("tasks.sync_customer", "a detail long enough to wrap in a narrow console " * 2)
    console.print(table)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue().splitlines()


def test_a_console_made_under_one_columns_prints_at_a_later_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    console = TerminalConsole(file=io.StringIO())
    monkeypatch.setenv("COLUMNS", "250")
    assert console.width == 250
    lines = _table_lines(console)
    assert max(len(line) for line in lines) > 80  # one row, not wrapped at the import's 80
    assert len(lines) == 5  # top rule, header, rule, the row, bottom rule


def test_a_width_given_to_the_console_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    console = TerminalConsole(file=io.StringIO(), width=60)
    assert console.width == 60
    assert max(len(line) for line in _table_lines(console)) <= 60
