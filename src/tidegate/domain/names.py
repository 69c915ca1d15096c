"""Validation of the names users choose: tasks, queues, tags, concurrency keys.

Names end up in SQL parameters, scope keys and CLI output, so a malformed one
is refused at the door with an error that says which name and why. No name,
tag or key may hold a control character (C0, DEL, C1): a terminal obeys those
instead of printing them, so `\x1b[2J` in a tag value would clear the screen
of whoever lists the runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeGuard

from tidegate.domain.errors import InvalidArgument
from tidegate.domain.integers import MAX_ATTEMPTS, STORED_INT_MIN, check_whole

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:\-/]{0,199}")
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:\-]{0,199}")  # '/' separates the partition in scope keys
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1: what a terminal acts on instead of printing


def escaped(char: str) -> str:
    """A character as Python writes it in a string literal (`\\x1b`, `\\n`): safe to print, plain to read."""
    return repr(char)[1:-1]


def text_problem(value: Any, max_length: int = 200) -> str | None:
    """Why `value` is not 1-max_length characters of one-line printable text, or None when it is.

    Both stores keep such text as given (no NUL, no lone surrogate) and a
    terminal prints it as it is (no control character).
    """
    if not isinstance(value, str):
        return f"it is {type(value).__name__}, not text"
    if not value:
        return "it is empty"
    if len(value) > max_length:
        return f"it is longer than {max_length} characters"
    control = CONTROL.search(value)
    if control:
        return f"it contains the control character {escaped(control.group())}"
    try:
        value.encode("utf-8")  # a lone surrogate is not text
    except UnicodeEncodeError:
        return "it contains a lone surrogate"
    return None


def check_name(kind: str, value: Any) -> str:
    queue = kind == "queue"
    if not isinstance(value, str) or not (_QUEUE_NAME if queue else _NAME).fullmatch(value):
        control = CONTROL.search(value) if isinstance(value, str) else None
        why = f"it contains the control character {escaped(control.group())}; " if control else ""
        allowed = "'_', '.', ':' or '-'" if queue else "'_', '.', ':', '-' or '/'"
        raise InvalidArgument(f"{kind} name {value!r} is not valid: {why}use 1-200 letters, digits, {allowed}")
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
            raise InvalidArgument(
                f"tag {key!r}: value {item!r} is not valid: {text_problem(item)} (use one line of text)"
            )
    return dict(value)


def check_priority(value: Any) -> int:
    return check_whole("priority", value, STORED_INT_MIN)


def check_max_attempts(value: Any) -> int:
    return check_whole("max_attempts", value, 1, MAX_ATTEMPTS)


def check_concurrency_key(value: Any) -> str | None:
    if value is None:
        return None
    if not is_one_line(value):
        raise InvalidArgument(f"concurrency_key {value!r} is not valid: {text_problem(value)} (use one line of text)")
    return value


def check_run_id(value: Any) -> str:
    """A run id as a user typed it: any one line of printable text (an unknown one is then simply not found)."""
    if not is_one_line(value):
        problem = text_problem(value)
        raise InvalidArgument(f"run id {value!r} is not valid: {problem}; give the id printed by submit or runs list")
    return value


def is_one_line(value: Any, max_length: int = 200) -> TypeGuard[str]:
    """1-max_length characters of one-line printable text (see `text_problem`)."""
    return text_problem(value, max_length) is None
