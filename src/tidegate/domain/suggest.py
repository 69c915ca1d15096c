"""Closest names: what an unknown name was probably meant to be.

A task is registered as `module.qualname` unless given `name=`, so a newcomer
types `add` for `tasks.add`. Matching the last dotted part as well as the whole
name finds it where a plain edit distance over the whole name would not.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from tidegate.domain.errors import UnknownTask

CUTOFF = 0.6  # difflib's own default: below it, names share too little to suggest
MOST = 3


def closest(name: str, known: Iterable[str], most: int = MOST) -> list[str]:
    """Up to `most` known names closest to `name`, best first (ties by name)."""
    scored = []
    for candidate in set(known):
        last = candidate.rsplit(".", 1)[-1]
        score = max(_ratio(name, candidate), _ratio(name, last), _ratio(name.rsplit(".", 1)[-1], last) - 0.1)
        if score >= CUTOFF:
            scored.append((-score, candidate))
    return [candidate for _, candidate in sorted(scored)[:most]]


def _ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a.casefold(), b.casefold()).ratio()


def unknown_task(name: str, known: Iterable[str], where: str) -> UnknownTask:
    """The error for a task name nobody registered: the closest registered names, else how to register it."""
    matches = closest(name, known)
    if matches:
        return UnknownTask(f"unknown task {name!r}; did you mean {' or '.join(repr(match) for match in matches)}?")
    return UnknownTask(
        f"unknown task {name!r}: no app has registered it in {where} "
        "(start a worker with the code once, or submit from the app that defines it)"
    )
