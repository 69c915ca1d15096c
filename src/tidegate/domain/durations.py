"""Human durations ("30s", "5m", "1h30m", "250ms") to seconds.

Every duration in tidegate's API, CLI and environment is one of these
strings (or a plain number of seconds), so one parser serves them all.
"""

from __future__ import annotations

import re

from tidegate.domain.errors import ConfigurationError

_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")

# The longest duration anywhere (a delay, a timeout, a lease, a poll): 100 years. Longer ones
# cannot work: a date that far away overflows `datetime`, and a thread's wait past ~292 years
# overflows the platform's timeout.
MAX_DURATION = 100 * 365 * 86400.0


def parse_duration(
    value: str | int | float, *, name: str = "duration", minimum: float = 0.0, maximum: float = MAX_DURATION
) -> float:
    """Return the duration in seconds, within [minimum, maximum]; `name` says which setting was wrong."""
    if isinstance(value, bool):
        raise ConfigurationError(f"{name}: expected a duration like '30s', got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse_text(value.strip().lower(), name)
    else:
        raise ConfigurationError(f"{name}: expected a duration like '30s', got {value!r}")
    if seconds < 0 or seconds != seconds or seconds == float("inf"):
        raise ConfigurationError(f"{name}: duration must be finite and not negative, got {value!r}")
    if not minimum <= seconds <= maximum:
        raise ConfigurationError(f"{name}: {value!r} is out of range: {describe_range(minimum, maximum)}")
    return seconds


def describe_range(minimum: float, maximum: float) -> str:
    """'use 10ms to 100 years' (or 'at most ...' when anything down to zero works)."""
    top = "100 years" if maximum == MAX_DURATION else format_duration(maximum)
    if minimum <= 0:
        return f"use at most {top}"
    return f"use {format_duration(minimum)} to {top}"


def _parse_text(text: str, name: str) -> float:
    if not text:
        raise ConfigurationError(f"{name}: empty duration")
    try:
        return float(text)  # a bare number means seconds
    except ValueError:
        pass
    position, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(text):
        raise ConfigurationError(
            f"{name}: cannot read {text!r} as a duration (use e.g. '250ms', '30s', '5m', '1h30m', '2d')"
        )
    return total


def format_duration(seconds: float) -> str:
    """The inverse, for display: 5400 -> '1h30m', 0.25 -> '250ms'."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = round(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, whole = divmod(whole, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"
