"""Validation of the names users choose: tasks, queues, tags, concurrency keys.

Names end up in SQL parameters, scope keys and CLI output, so a malformed one
is refused at the door with an error that says which name and why.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeGuard

from tidegate.domain.errors import InvalidArgument
from tidegate.domain.integers import MAX_ATTEMPTS, STORED_INT_MIN, check_whole

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:\-/]{0,199}$")
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]{0,199}$")  # '/' separates the partition in scope keys


def check_name(kind: str, value: Any) -> str:
    if kind == "queue":
        if not isinstance(value, str) or not _QUEUE_NAME.match(value):
            raise InvalidArgument(f"queue name {value!r} is not valid: use 1-200 letters, digits, '_', '.', ':' or '-'")
        return value
    if not isinstance(value, str) or not _NAME.match(value):
        raise InvalidArgument(
            f"{kind} name {value!r} is not valid: use 1-200 letters, digits, '_', '.', ':', '-' or '/'"
        )
    return value


def check_tags(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        hint = ""
        if isinstance(value, str) and "=" in value:
            key, _, item = value.partition("=")
            hint = f" (write tags={{{key.strip()!r}: {item.strip()!r}}})"
        raise InvalidArgument(f"tags must be a dict of str to str, got {type(value).__name__} {value!r}{hint}")
    for key, item in value.items():
        check_name("tag", key)
        if not is_one_line(item):
            raise InvalidArgument(f"tag {key!r}: value {item!r} must be a non-empty one-line string of text")
    return dict(value)


def check_priority(value: Any) -> int:
    return check_whole("priority", value, STORED_INT_MIN)


def check_max_attempts(value: Any) -> int:
    return check_whole("max_attempts", value, 1, MAX_ATTEMPTS)


def check_concurrency_key(value: Any) -> str | None:
    if value is None:
        return None
    if not is_one_line(value):
        raise InvalidArgument(f"concurrency_key must be a non-empty one-line string of text, got {value!r}")
    return value


def check_run_id(value: Any) -> str:
    """A run id as a user typed it: any one line of text (an unknown one is then simply not found)."""
    if not is_one_line(value):
        raise InvalidArgument(f"run id {value!r} is not valid: give the id printed by submit or runs list")
    return value


def is_one_line(value: Any, max_length: int = 200) -> TypeGuard[str]:
    """1-max_length characters of Unicode text without a line break or NUL, so both stores keep it as given."""
    if not isinstance(value, str) or not value or len(value) > max_length or "\n" in value or "\x00" in value:
        return False
    try:
        value.encode("utf-8")  # a lone surrogate is not text
    except UnicodeEncodeError:
        return False
    return True
