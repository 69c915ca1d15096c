"""The rules a value must meet before it is stored: plain JSON, and storable on both adapters.

Args and results cross processes and languages through the store, and
nothing read from the store is ever unpickled, so only JSON types pass. The
same value must be accepted or refused alike by SQLite and PostgreSQL, so the
rules are the intersection of both: no NUL character (PostgreSQL's text and
jsonb refuse it), no lone surrogate (not Unicode text, so not UTF-8), a
bounded nesting depth (a deep value would blow Python's recursion when read
back) and a bounded size (TIDEGATE_MAX_PAYLOAD). The walk is iterative, so a
hostile value cannot raise a RecursionError here. Every error names the
offending path so the caller can fix it.
"""

from __future__ import annotations

import json
import json.encoder as json_encoder
import math
from collections.abc import Callable, Iterable
from typing import Any

from tidegate.domain.errors import InvalidArgument
from tidegate.domain.sizes import format_size

JSONValue = Any  # None | bool | int | float | str | list | dict[str, ...]

MAX_DEPTH = 64  # lists and objects inside one another; json.loads itself fails near 1,000
MAX_INT_BITS = 13_000  # ~3,900 digits: Python refuses to print an int of more than 4,300
DEFAULT_MAX_PAYLOAD = 4 * 1024 * 1024
PAYLOAD_SETTING = "TIDEGATE_MAX_PAYLOAD"

_ESCAPED = 12  # the most JSON text one character can take: a surrogate pair as two \uXXXX
_FLOAT_CHARS = 24  # the longest repr of a float, e.g. -2.2250738585072014e-308

# (value, depth, parent entry, key or index in the parent): the path is only built on error.
_Entry = tuple[Any, int, Any, Any]


def ensure_json(value: Any, path: str, *, max_bytes: int | None = None) -> int:
    """Raise InvalidArgument naming `path` if `value` is not storable JSON; else return an upper
    bound of its JSON text's length (which lets `ensure_size` skip serializing a small value).

    With `max_bytes`, a value whose JSON text is certainly larger is refused
    during the walk, before it is ever serialized.
    """
    stack: list[_Entry] = [(value, 0, None, None)]
    at_least = 0  # bounds of the JSON text's length
    at_most = 0
    while stack:
        least, most = _check_entry(stack.pop(), path, stack)
        at_least += least
        at_most += most
        if max_bytes is not None and at_least > max_bytes:
            raise InvalidArgument(f"{path}: more than {format_size(max_bytes)} of JSON, {_over(max_bytes)}")
    return at_most


def _check_entry(entry: _Entry, path: str, stack: list[_Entry]) -> tuple[int, int]:
    """Check one value and push its children onto `stack`; return the bounds of the JSON text it
    adds itself (its children's text is counted when they are popped)."""
    item = entry[0]
    if item is None or isinstance(item, bool):
        return 4, 5
    if isinstance(item, str):
        _check_text(item, entry, path)
        return len(item) + 2, _ESCAPED * len(item) + 2
    if isinstance(item, int):
        if item.bit_length() > MAX_INT_BITS:
            raise InvalidArgument(f"{_path(entry, path)}: integer too large (more than ~3,900 digits)")
        return 1, item.bit_length() // 3 + 2  # digits <= bits * log10(2) + 1, and a sign
    if isinstance(item, float):
        if not math.isfinite(item):
            raise InvalidArgument(f"{_path(entry, path)}: {item!r} is not a JSON number")
        return 1, _FLOAT_CHARS
    if isinstance(item, dict):
        return _push_members(item, entry, path, stack)
    if isinstance(item, (list, tuple)):
        _check_depth(entry, path)
        for index in range(len(item) - 1, -1, -1):
            stack.append((item[index], entry[1] + 1, entry, index))
        return 2 + len(item), 2 + len(item)
    raise InvalidArgument(f"{_path(entry, path)}: value of type {type(item).__name__} is not JSON")


def _push_members(item: dict[Any, Any], entry: _Entry, path: str, stack: list[_Entry]) -> tuple[int, int]:
    """An object: check its keys (strings, storable), push its values; the bounds of its braces, commas and keys."""
    _check_depth(entry, path)
    at_least = at_most = 2 + len(item)
    for key, child in reversed(item.items()):
        if not isinstance(key, str):
            raise InvalidArgument(f"{_path(entry, path)}: key {key!r} is not a string (JSON objects have string keys)")
        _check_text(key, entry, path, key=True)
        at_least += len(key) + 3
        at_most += _ESCAPED * len(key) + 3
        stack.append((child, entry[1] + 1, entry, repr(key)))
    return at_least, at_most


def _check_depth(entry: _Entry, path: str) -> None:
    if entry[1] >= MAX_DEPTH:
        raise InvalidArgument(f"{_path(entry, path)}: nested deeper than {MAX_DEPTH} levels")


def ensure_size(value: JSONValue, what: str, max_bytes: int, *, at_most: int | None = None) -> None:
    """Refuse a checked JSON value whose stored text exceeds `max_bytes`, saying by how much
    (and, for an object such as a run's args, which member is the largest). `at_most` (from
    `ensure_json`) spares serializing a value that certainly fits."""
    if at_most is not None and at_most <= max_bytes:
        return
    size = json_size(value)
    if size <= max_bytes:
        return
    largest = ""
    if isinstance(value, dict) and value:
        key = max(value, key=lambda name: json_size(value[name]))
        largest = f" (the largest: {key[:40]!r}, {format_size(json_size(value[key]))})"
    raise InvalidArgument(f"{what}: {format_size(size)} of JSON{largest}, {_over(max_bytes)}")


def ensure_payload(value: Any, path: str, max_bytes: int) -> None:
    """`ensure_json` and `ensure_size`: a result or a step output, as it will be stored."""
    ensure_size(value, path, max_bytes, at_most=ensure_json(value, path, max_bytes=max_bytes))


def json_size(value: JSONValue) -> int:
    """Bytes of the stored text (ASCII: `dumps` escapes everything else)."""
    return len(dumps(value))


def dumps(value: JSONValue) -> str:
    """Compact, deterministic JSON text for storage."""
    if _C_ENCODE is None:
        return _ENCODER.encode(value)
    return "".join(_C_ENCODE(value, 0))


# One encoder for every `dumps` (`json.dumps` with options builds a new one per call; it keeps no state).
_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True, allow_nan=False)
# And its C encoder, built once: `JSONEncoder.encode` builds one per call, half the cost of a small
# event's metadata, which every run's transitions pay several times. The same options (ASCII, compact,
# sorted keys, no NaN); no circular-reference markers: a JSON value built in code has no cycle, and
# one would end in RecursionError rather than a loop.
_MAKE_C_ENCODER: Callable[..., Callable[[Any, int], Iterable[str]]] | None = getattr(
    json_encoder, "c_make_encoder", None
)  # absent from the type stubs, and None where the C accelerator is not built
_C_ENCODE = (
    None
    if _MAKE_C_ENCODER is None
    else _MAKE_C_ENCODER(
        None, _ENCODER.default, json_encoder.encode_basestring_ascii, None, ":", ",", True, False, False
    )
)


def _over(max_bytes: int) -> str:
    return f"over the limit of {format_size(max_bytes)} ({PAYLOAD_SETTING})"


def _check_text(text: str, entry: _Entry, path: str, *, key: bool = False) -> None:
    what = f"key {text[:20]!r}" if key else "string"
    if "\x00" in text:
        raise InvalidArgument(
            f"{_path(entry, path)}: {what} contains the NUL character (\\u0000), which cannot be stored"
        )
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise InvalidArgument(
                f"{_path(entry, path)}: {what} contains a lone surrogate "
                f"({ascii(text[error.start])[1:-1]}), which is not valid Unicode text"
            ) from None


def _path(entry: _Entry, root: str) -> str:
    """`root[2]['name']`: the keys and indexes from the root down to `entry`."""
    parts: list[str] = []
    while entry is not None and entry[2] is not None:
        parts.append(f"[{entry[3]}]")
        entry = entry[2]
    return root + "".join(reversed(parts))
