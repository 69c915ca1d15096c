"""Reading `--arg`, `--args` and `--tag` values into the dicts submit takes.

Kept apart from the command so the rules are easy to state and to test:
`--arg k=v` is JSON when `v` parses as JSON (`n=3` -> 3, `ok=true` -> True)
and a string otherwise (`name=bob` -> "bob"); `--args` must be a JSON object;
`--arg` wins over `--args` for the same name.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tidegate.cli.errors import CommandError


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN/Infinity: keep the text as a string


def parse_value(text: str) -> Any:
    try:
        return _loads(text)
    except ValueError:
        return text


def _loads(text: str) -> Any:
    """JSON text; one nested past Python's recursion limit is refused here, not as a traceback."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise CommandError(f"JSON value nested too deep: {text[:40]!r}...") from None


def split_assignment(option: str, item: str) -> tuple[str, str]:
    key, equals, value = item.partition("=")
    key = key.strip()
    if not equals or not key:
        raise CommandError(f"{option} {item!r}: expected NAME=VALUE, e.g. {option} n=3")
    return key, value


def parse_args(args_json: str | None, assignments: Sequence[str]) -> dict[str, Any]:
    args: dict[str, Any] = {}
    if args_json is not None:
        try:
            loaded = _loads(args_json)
        except ValueError as error:
            raise CommandError(f"--args is not valid JSON ({error}): {args_json!r}") from None
        if not isinstance(loaded, dict):
            raise CommandError(f"--args must be a JSON object like '{{\"n\": 3}}', got {args_json!r}")
        args.update(loaded)
    for item in assignments:
        key, value = split_assignment("--arg", item)
        args[key] = parse_value(value)
    return args


def parse_tags(assignments: Sequence[str]) -> dict[str, str]:
    return dict(split_assignment("--tag", item) for item in assignments)
