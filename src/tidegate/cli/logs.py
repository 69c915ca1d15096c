"""The log of `tidegate worker` and `tidegate serve` on stderr: text for a person, or JSON lines
(`--log-format json`) for a machine.

A JSON line is one object: `ts` (UTC, ISO 8601), `level`, `logger`, `message`,
and the fields a lifecycle line carries (worker/attempt_log.py: `event`,
`run_id`, `task`, `queue`, `attempt`, ...; api/access_log.py: `method`,
`path`, `status`, `duration_ms`, `client`). uvicorn's own loggers and Python's
warnings go through the same handler, so with JSON every line is an object.
When a span is active (an attempt's or a request's, with an OpenTelemetry SDK
configured) it has `trace_id` and `span_id` too, as the trace shows them, so a log search finds a trace's lines.
The text format shows stored text with control characters escaped
(cli/terminal.py); JSON escapes them by itself.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from pythonjsonlogger.json import JsonFormatter

from tidegate.cli.errors import CommandError
from tidegate.cli.terminal import VisibleFormatter
from tidegate.engine.runtime import tracing
from tidegate.worker import attempt_log

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class TraceIds(logging.Filter):
    """Adds the active span's ids to each record (logging calls its handlers on the caller's thread,
    where the caller's span is the active one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ids = tracing.current_ids()
        if ids is not None:
            record.trace_id, record.span_id = ids
        return True


class JsonLines(JsonFormatter):
    """python-json-logger's formatter, with the level in lower case as the fields' other values are, and
    without uvicorn's `color_message` (its message again with terminal colours)."""

    def __init__(self) -> None:
        super().__init__(
            "%(levelname)s %(message)s %(name)s",
            rename_fields={"levelname": "level", "name": "logger"},
            timestamp="ts",
        )

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        super().add_fields(log_data, record, message_dict)
        log_data["level"] = record.levelname.lower()
        log_data.pop("color_message", None)


def configure_logging(level: str, tracebacks: bool = False, log_format: str = "text") -> None:
    """One handler on the root logger, which every logger reaches (tidegate's, your tasks', uvicorn's when
    its own configuration is off). A worker writes one INFO line per transition of a run (DEBUG adds
    claimed and started); tracebacks at DEBUG, or with `tracebacks` whatever the level (only their
    logger is lowered)."""
    number = logging.getLevelName(level.upper())
    if not isinstance(number, int):
        raise CommandError(f"--log-level {level!r}: use debug, info, warning or error")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if log_format == "json" else VisibleFormatter(TEXT_FORMAT))
    handler.addFilter(TraceIds())
    logging.basicConfig(level=number, handlers=[handler])
    logging.captureWarnings(True)  # a warning is a line in the chosen format too, not raw text on stderr
    if tracebacks:
        attempt_log.tracebacks.setLevel(logging.DEBUG)
