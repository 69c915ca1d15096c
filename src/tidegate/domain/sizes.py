"""Human sizes ("4MiB", "512KB", "1048576") to bytes, and back for messages.

Only the payload limit is a size today; it is read like the durations, so an
operator writes `TIDEGATE_MAX_PAYLOAD=8MiB` rather than counting digits.
"""

from __future__ import annotations

import re

from tidegate.domain.errors import ConfigurationError

_UNITS = {
    "": 1, "b": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3,
    "k": 1024, "kib": 1024, "m": 1024**2, "mib": 1024**2, "g": 1024**3, "gib": 1024**3,
}  # fmt: skip
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")


def parse_size(value: str | int, *, name: str = "size") -> int:
    """Bytes; `name` says which setting was wrong."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ConfigurationError(f"{name}: expected a size like '4MiB', got {value!r}")
    if isinstance(value, int):
        return value
    match = _SIZE.fullmatch(value.strip().lower())
    if match is None or match.group(2) not in _UNITS:
        raise ConfigurationError(f"{name}: cannot read {value!r} as a size (use e.g. '512KiB', '4MiB', '1048576')")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def format_size(size: int) -> str:
    """4194304 -> '4 MiB', 1500 -> '1.5 KiB', 12 -> '12 B'."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{size} B"
