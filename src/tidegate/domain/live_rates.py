"""Live rates: an operator's override of one window of a rate, as a limit target.

A rate window is named by its scope and its length: `rate:openai@1m` is the one-minute
window of queue `openai`'s rate, `rate:openai/api_key=k1@1m` that window of one rate
partition, `rate:tag:tenant=acme@1s` a tag rate's, and `rate:openai@1m` or
`rate:tag:tenant@1s` (no value) every partition or every value at once. These targets
live in the one table of live limits beside `queue:...` and `tag:...`: set, reset,
versioned and audited (`LimitChanged`) the same way, read into the rules the same way.

Only a window's limit changes live: its length identifies it (GCRA keeps one state per
scope and window length, `domain.rates.window_key`), and its burst follows the limit in
the declared proportion (`relimited`), so a lowered limit never keeps a burst above it.

What a change does to tokens already granted: nothing is taken back. The stored state
(GCRA's theoretical arrival time) is kept as it is, and every start after the change is
charged the new interval against it. So any window of length `per` that begins at or
after the change holds at most the new limit (GCRA's bound, `domain.rates`, holds for any
state it starts from), and a window that straddles the change holds the starts granted
before it plus at most the new limit. The first start after a lowering waits until the
state the old rate left has drained to within the new burst.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from fractions import Fraction
from functools import lru_cache

from tidegate.domain.adaptive import AdaptiveState
from tidegate.domain.durations import format_duration, parse_duration
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.rates import MIN_PER, NS, Rate, window_key

WINDOW_MARK = "@"  # between a rate scope and its window's length in a target


@lru_cache(maxsize=256)
def window_text(seconds: float) -> str:
    """A window's length as targets spell it: `1m`, `250ms`; in seconds (`1.5s`) where the short
    form would name another window."""
    short = format_duration(seconds)
    if round(Fraction(parse_duration(short)) * NS) == round(Fraction(seconds) * NS):
        return short
    return f"{seconds:g}s"


def rate_target(scope: str, rate: Rate) -> str:
    """The target of one window of a rate scope: `rate:openai@1m`."""
    return f"{scope}{WINDOW_MARK}{window_text(rate.seconds)}"


def split_rate_target(target: str) -> tuple[str, str | None]:
    """(scope, window as typed) of a rate target; None when it names no window. The window is the
    text after the last `@` (a partition or tag value may hold one; a window never does)."""
    scope, mark, per = target.rpartition(WINDOW_MARK)
    return (scope, per) if mark and scope else (target, None)


def pick_window(target: str, scope: str, per: str | None, windows: Sequence[Rate]) -> Rate:
    """The declared window a target names: by its length, or the only one when it names none."""
    names = ", ".join(window_text(rate.seconds) for rate in windows)
    if per is None:
        if len(windows) == 1:
            return windows[0]
        raise ConfigurationError(
            f"limit target {target!r}: the rate has several windows ({names}); name one: {scope}@PER"
        )
    try:
        seconds = parse_duration(per, name=f"limit target {target!r}: the window", minimum=MIN_PER)
    except ConfigurationError as error:
        raise ConfigurationError(f"{error} (its windows: {names})") from None
    for rate in windows:
        if window_key(rate) == round(Fraction(seconds) * NS):
            return rate
    raise ConfigurationError(f"limit target {target!r}: the rate has no window of {per} (its windows: {names})")


def relimited(rate: Rate, limit: int) -> Rate:
    """The window with another limit, its burst scaled in proportion (at least 1): a declared 100/s
    with burst 5 set to 40/s gets burst 2, set to 10/s burst 1. A start costing more than the new
    burst waits until the limit is raised again (`domain.rates.take`)."""
    burst = max(1, min(limit, rate.allowed_burst * limit // rate.limit))
    # The window in force, not a declaration: what adapts (and its range) is the declared window's.
    return replace(rate, limit=limit, burst=burst, adaptive=None)


def family_targets(scope: str) -> list[str]:
    """The scopes whose override covers `scope`, most specific first: a rate partition's own, then
    its queue's (`rate:Q/P` -> `rate:Q`); a tag value's own, then every value's (`rate:tag:K=V` ->
    `rate:tag:K`)."""
    if scope.startswith("rate:tag:"):
        key, equals, _ = scope[len("rate:tag:") :].partition("=")
        return [scope, f"rate:tag:{key}"] if equals else [scope]
    name, slash, _ = scope.partition("/")
    return [scope, name] if slash else [scope]


def in_force(
    scope: str,
    declared: Sequence[Rate],
    overrides: Mapping[str, int | None],
    adaptive: Mapping[str, AdaptiveState] | None = None,
) -> tuple[Rate, ...]:
    """The windows of `scope` in force: each declared window with the limit of the most specific live
    override of it (`family_targets`); else, for an adaptive window, its stored effective limit
    (`adaptive_limit`); else the code's."""
    if not overrides and not adaptive:
        return tuple(declared)
    windows = []
    for rate in declared:
        limit = next(
            (
                overrides[key]
                for key in (rate_target(owner, rate) for owner in family_targets(scope))
                if key in overrides
            ),
            None,
        )
        if limit is None and rate.adaptive is not None:
            limit = adaptive_limit(rate, (adaptive or {}).get(rate_target(scope, rate)))
        windows.append(rate if limit is None or limit == rate.limit else relimited(rate, limit))
    return tuple(windows)


def adaptive_limit(rate: Rate, state: AdaptiveState | None) -> int | None:
    """An adaptive window's effective limit: its stored state within [min, ceiling]; the ceiling
    (`Adaptive.max`, else the declared limit) until a signal stored one; None when not adaptive."""
    ceiling = rate.adaptive_ceiling
    if rate.adaptive is None or ceiling is None:
        return None
    return ceiling if state is None else max(rate.adaptive.min, min(state.limit, ceiling))
