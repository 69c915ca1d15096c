"""The console every CLI line goes through: stored text is shown, never obeyed.

Names, tags and keys are refused at the door when they hold a control
character, but error messages, event details, worker ids and anything an
older store kept may still carry ESC (`\\x1b[2J` clears the screen, `\\x1b]0;`
sets the title, `\\x1b]52;` writes the clipboard), C1 characters or a carriage
return that forges a line. So the console itself writes every control
character but the line break as its escape (`\\x1b`), and never reads Rich
markup or emoji codes in text: `[bold red]` and `:smile:` print as typed.
Rich's own escape codes (colours, cursor moves of a live display) are added
after this, so they are untouched.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.protocol import rich_cast
from rich.segment import Segment
from rich.text import Span, Text

from tidegate.domain.names import escaped

_SHOWN = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # every control character but the line break


def visible(text: str) -> str:
    """`text` with each control character but a line break written as its escape."""
    return _SHOWN.sub(lambda match: escaped(match.group()), text)


def visible_text(text: Text) -> Text:
    """`visible` for a styled text: its styles stretch over the escapes that replace characters."""
    plain = text.plain
    if not _SHOWN.search(plain):
        return text
    shift = [0] * (len(plain) + 1)  # how far each old offset moves right
    pieces = []
    for index, char in enumerate(plain):
        shown = visible(char)
        pieces.append(shown)
        shift[index + 1] = shift[index] + len(shown) - 1
    result = text.copy()
    result.plain = "".join(pieces)
    last = len(plain)
    result.spans = [Span(start + shift[start], end + shift[min(end, last)], style) for start, end, style in text.spans]
    return result


class VisibleFormatter(logging.Formatter):
    """Log lines as `visible` text: a task's error message (the worker logs its first line, and at
    DEBUG its traceback) may carry the same escape sequences as a stored one."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record))


class TerminalConsole(Console):
    """A Rich console that shows control characters as escapes and reads no markup or emoji in text."""

    def __init__(self, **options: Any) -> None:
        super().__init__(markup=False, emoji=False, highlight=False, **options)
        # Rich pins the COLUMNS and LINES it finds when the console is made; the CLI's consoles are
        # made at import, so a width set later (a caller's COLUMNS, a test's) would be ignored and the
        # output would depend on what the environment held at import. Unpinned, Rich reads them (or
        # the terminal) at each print.
        if options.get("width") is None:
            self._width = None
        if options.get("height") is None:
            self._height = None

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        """Rich renders everything, tables' cells included, through here: texts are made visible
        before they are laid out (so widths count the escapes), and any other segment after."""
        renderable = rich_cast(renderable)  # a JSON view becomes its Text here, so its text is made visible too
        if isinstance(renderable, str):
            renderable = visible(renderable)
        elif isinstance(renderable, Text):
            renderable = visible_text(renderable)
        for segment in super().render(renderable, options):
            if segment.control or not _SHOWN.search(segment.text):
                yield segment
            else:
                yield Segment(visible(segment.text), segment.style)
