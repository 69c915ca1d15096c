"""Checks that a value is plain JSON before it is stored.

Args and results cross processes and languages through the store, and
nothing read from the store is ever unpickled, so only JSON types pass.
The error names the offending path so the caller can fix it.
"""

from __future__ import annotations

import json
import math
from typing import Any

from tidegate.domain.errors import InvalidArgument

JSONValue = Any  # None | bool | int | float | str | list | dict[str, ...]


def ensure_json(value: Any, path: str) -> None:
    """Raise InvalidArgument naming `path` if `value` is not JSON."""
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgument(f"{path}: {value!r} is not a JSON number")
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            ensure_json(item, f"{path}[{index}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidArgument(f"{path}: key {key!r} is not a string (JSON objects have string keys)")
            ensure_json(item, f"{path}[{key!r}]")
        return
    raise InvalidArgument(f"{path}: value of type {type(value).__name__} is not JSON")


def dumps(value: JSONValue) -> str:
    """Compact, deterministic JSON text for storage."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False)
