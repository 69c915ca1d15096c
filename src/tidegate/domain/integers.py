"""The whole numbers users give that the stores keep in 32-bit columns: their ranges, written once.

PostgreSQL keeps priorities, limits, slots, capacities and attempt budgets as
`integer`; a value past its range fails every later write of it with a raw
`NumericValueOutOfRange`, while SQLite (64-bit) would store it. So each such
value is refused where it is given (a declaration, a submit option, a live
limit, at every door), naming the field and its range, on both backends alike.

`max_attempts` is bounded well below the column's end: a run's budget grows
by one with every attempt that does not count (a hand-back, a wait on
children, a rescue not charged to it), so the bound leaves room for a
billion of those, and the growth saturates at the column's end (`grown`)
for a row stored before the bound.
"""

from __future__ import annotations

from tidegate.domain.errors import InvalidArgument, TidegateError

STORED_INT_MAX = 2**31 - 1  # PostgreSQL `integer`
STORED_INT_MIN = -(2**31)
MAX_ATTEMPTS = 10**9  # leaves more than 10^9 uncharged attempts of room below STORED_INT_MAX


def check_whole(
    field: str,
    value: object,
    minimum: int,
    maximum: int = STORED_INT_MAX,
    error: type[TidegateError] = InvalidArgument,
) -> int:
    """`value` if it is an int (not a bool) from `minimum` to `maximum`, else `error` naming `field`."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise error(f"{field} must be an integer from {minimum} to {maximum}, got {value!r}")
    return value


def grown(max_attempts: int) -> int:
    """The budget after an attempt that does not count: one more, so what is left is untouched.

    Saturates at the column's end rather than overflow it (only a row stored
    before `MAX_ATTEMPTS` bounded declarations can get there).
    """
    return min(max_attempts + 1, STORED_INT_MAX)
