"""Rendering shared by the commands: consoles, times, statuses, JSON.

Kept apart from the commands so that every table shows a run the same way
(same colours, same time format) and the commands stay about what they do.
Both consoles are `TerminalConsole`s: text from the store prints as it is,
never as Rich markup, and its control characters as escapes. `--json` keeps
every string exact, with its control characters (C1 and DEL too) as JSON escapes.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import sys
from datetime import datetime, timedelta
from typing import Any

from rich.text import Text

from tidegate.cli.terminal import TerminalConsole
from tidegate.domain.model import RunStatus

stdout = TerminalConsole()
stderr = TerminalConsole(stderr=True)
_RAW_IN_JSON = re.compile(r"[\x7f-\x9f]")  # control characters json.dumps leaves raw with ensure_ascii=False

STATUS_STYLES = {
    RunStatus.QUEUED: "yellow",
    RunStatus.RUNNING: "cyan",
    RunStatus.WAITING: "blue",
    RunStatus.COMPLETED: "green",
    RunStatus.FAILED: "bold red",
    RunStatus.CANCELED: "magenta",
}


def status_text(status: RunStatus) -> Text:
    return Text(status.value, style=STATUS_STYLES[status])


def local(moment: datetime) -> datetime:
    """Stored times are UTC; people read their own clock."""
    return moment.astimezone()


def short_time(moment: datetime | None, now: datetime | None = None) -> str:
    """A time for a table cell: clock time today, the date otherwise."""
    if moment is None:
        return "-"
    moment = local(moment)
    now = now or datetime.now().astimezone()
    if moment.date() == now.date():
        return moment.strftime("%H:%M:%S")
    if moment.year == now.year:
        return moment.strftime("%b %d %H:%M")
    return moment.strftime("%Y-%m-%d")


def long_time(moment: datetime | None) -> str:
    """A full local time, to the millisecond, for one run's details."""
    if moment is None:
        return "-"
    moment = local(moment)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d} {moment.strftime('%Z')}"


def clock_time(moment: datetime) -> str:
    """Time of day with milliseconds: events of one run are close together."""
    moment = local(moment)
    return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def seconds_text(seconds: float) -> str:
    """12ms, 1.25s, 3m04s: precise when short, readable when long."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.2f}s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _json(value: Any, **options: Any) -> str:
    """JSON with non-ASCII text as it is, except DEL and C1 (JSON already escapes C0): written
    `\\u0085`, the same string to a parser, never a raw control character to a terminal."""
    text = json.dumps(value, ensure_ascii=False, **options)
    return _RAW_IN_JSON.sub(lambda match: f"\\u{ord(match.group()):04x}", text)  # only strings hold non-ASCII


def compact_json(value: Any) -> str:
    return _json(value, separators=(",", ":"), sort_keys=True)


def _json_default(value: Any) -> Any:
    """What `--json` prints for values JSON has no type for: ISO times in UTC, seconds, enum values."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return sorted(value) if isinstance(value, (set, frozenset)) else list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def print_json(value: Any) -> None:
    """`--json` output: one document on stdout, bypassing Rich so nothing is wrapped, coloured or cut."""
    sys.stdout.write(_json(value, default=_json_default, indent=2) + "\n")
    sys.stdout.flush()


def pretty_json(value: Any) -> str:
    return _json(value, indent=2)


def compact_metadata(metadata: dict[str, Any]) -> str:
    """`key=value` pairs on one line, text values last; a traceback shows only its first line."""
    parts = []
    for key in sorted(metadata, key=lambda name: (isinstance(metadata[name], str) and len(metadata[name]) > 40, name)):
        value = metadata[key]
        if isinstance(value, str):
            lines = value.strip().splitlines() or [""]
            text = lines[0] + (" …" if len(lines) > 1 else "")
        else:
            text = compact_json(value)
        parts.append(f"{key}={text}")
    return " ".join(parts)
