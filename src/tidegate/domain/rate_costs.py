"""Weighted rates: the cost units one start takes of every window of its queue's rate.

A task declares `rate_cost=`: a whole number, or a function of the run's args.
The function is called once, at submit, and its answer stored with the run: the
claim charges what was stored and never calls user code. A submit may also give
the cost itself (`options(rate_cost=)`, `tidegate submit --rate-cost`, the HTTP
body's `rate_cost`), which is how a process without the task's code submits a
task whose cost is a function. A cost is refused at submit, naming what is
wrong, unless it is a whole number of at least 1 within every window's burst of
the queue's rate (a larger one could never start). `ctx.report_cost(n)` corrects
the charge of a running attempt (`domain.rates.correct`; `n` may be 0).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tidegate.domain.errors import ConfigurationError, InvalidArgument
from tidegate.domain.integers import STORED_INT_MAX, check_whole
from tidegate.domain.rates import Rate

# A task's declared cost: a whole number, or a function of the run's args (a dict) returning one.
RateCost = int | Callable[[Mapping[str, Any]], int]


def check_declared(task: str, value: object) -> RateCost:
    """A task's `rate_cost` as declared: a whole number of at least 1, or a function of the args."""
    if callable(value):
        return value  # checked on each answer, at submit
    return check_whole(f"task {task}: rate_cost", value, 1, STORED_INT_MAX, ConfigurationError)


def cost_of(task: str, declared: RateCost | None, given: object, args: Mapping[str, Any], rates: Sequence[Rate]) -> int:
    """The cost a run submitted with `args` is stored with (InvalidArgument naming what is wrong).

    `given`: the submit's own cost (None: the task's). `declared` is None when the
    task's cost is a function and this process does not have the task's code.
    """
    if given is not None:
        cost = check_whole(f"{task}: rate_cost", given, 1)
    elif declared is None:
        raise InvalidArgument(
            f"{task}: its rate_cost is a function of its args and this process does not have the task's code; "
            "give the cost with the submit (rate_cost=N, --rate-cost N)"
        )
    elif callable(declared):
        try:
            answer = declared(dict(args))
        except Exception as error:
            raise InvalidArgument(f"{task}: rate_cost raised {type(error).__name__}: {error}") from error
        cost = check_whole(f"{task}: rate_cost returned a value that", answer, 1)
    else:
        cost = declared
    for rate in rates:
        if cost > rate.allowed_burst:
            raise InvalidArgument(
                f"{task}: rate_cost {cost} exceeds the burst {rate.allowed_burst} of its queue's rate "
                f"{rate.label}: such a run could never start"
            )
    return cost


def stored_declaration(declared: RateCost | None) -> int | None:
    """What the task registry stores: the whole number, or NULL for a function (code-only)."""
    return declared if isinstance(declared, int) else None


def check_report(value: object) -> int:
    """`ctx.report_cost(n)`: what the attempt really cost, a whole number from 0."""
    return check_whole("report_cost", value, 0)
