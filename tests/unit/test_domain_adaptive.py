"""The adaptive limit's rule (domain/adaptive.py): AIMD within [min, ceiling], one cut per generation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegate.domain.adaptive import OVERLOADED, RECOVERED, Adaptive, AdaptiveState, Signal, adapt, describe
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.limits import Concurrency, Partition, QueueConfig, queue_from_dict, queue_to_dict
from tidegate.domain.scopes import Rules

adaptives = st.builds(
    Adaptive,
    min=st.integers(1, 5),
    decrease=st.floats(0.05, 0.95),
    increase=st.integers(1, 4),
    after=st.integers(1, 6),
)
ALWAYS_FULL = 10**6  # runs in flight: every limit was in use
signals = st.lists(
    st.builds(Signal, overloaded=st.booleans(), admitted_at=st.one_of(st.none(), st.floats(0, 100))), max_size=60
)


@given(
    adaptive=adaptives,
    extra=st.integers(0, 40),
    signals=signals,
    start=st.one_of(st.none(), st.integers(0, 80)),
    busy=st.integers(0, 60),
)
def test_the_limit_stays_within_min_and_the_ceiling_and_each_change_is_reported(adaptive, extra, signals, start, busy):
    ceiling = adaptive.min + extra
    state = None if start is None else AdaptiveState(start)
    now = 50.0
    after, changes = adapt(state, adaptive, ceiling, signals, now, busy)
    assert adaptive.min <= after.limit <= ceiling
    limits = [c.old for c in changes[:1]] + [c.new for c in changes]
    for change in changes:
        assert change.old != change.new
        if change.reason == OVERLOADED:
            assert change.new == max(adaptive.min, math.floor(change.old * adaptive.decrease)) < change.old
        else:
            assert change.reason == RECOVERED and change.new == min(ceiling, change.old + adaptive.increase)
            assert busy >= change.old  # only a limit in use grows
    if changes:
        assert limits[-1] == after.limit
    assert after.lowered_at == (now if any(c.reason == OVERLOADED for c in changes) else (state or after).lowered_at)


@given(adaptive=adaptives, extra=st.integers(1, 40), successes=st.integers(0, 200))
def test_successes_raise_the_limit_by_increase_every_after_of_them(adaptive, extra, successes):
    ceiling = adaptive.min + extra
    state, changes = adapt(
        AdaptiveState(adaptive.min), adaptive, ceiling, [Signal(False, 1.0)] * successes, 2.0, ALWAYS_FULL
    )
    steps = successes // adaptive.after
    assert state.limit == min(ceiling, adaptive.min + steps * adaptive.increase)
    assert all(change.reason == RECOVERED for change in changes)


@given(adaptive=adaptives, limit=st.integers(2, 60), stale=st.integers(1, 20))
def test_one_cut_per_generation_overloads_of_runs_started_before_the_last_cut_are_ignored(adaptive, limit, stale):
    """The runs in flight when the downstream first says "too many" cut the limit once, not once each."""
    ceiling = max(limit, adaptive.min)
    first, changes = adapt(
        AdaptiveState(ceiling, lowered_at=10.0), adaptive, ceiling, [Signal(True, 11.0)], 20.0, ALWAYS_FULL
    )
    again, more = adapt(first, adaptive, ceiling, [Signal(True, 15.0)] * stale, 21.0, ALWAYS_FULL)
    assert again.limit == first.limit and more == []
    if ceiling > adaptive.min:
        assert len(changes) == 1 and first.limit < ceiling
    later, cut = adapt(
        first, adaptive, ceiling, [Signal(True, 20.5)], 22.0, ALWAYS_FULL
    )  # admitted under the new limit
    assert later.limit < first.limit or first.limit == adaptive.min
    assert bool(cut) == (first.limit > adaptive.min)


@given(adaptive=adaptives, extra=st.integers(1, 40), successes=st.integers(0, 200), idle=st.integers(1, 40))
def test_successes_under_a_limit_nobody_fills_never_raise_it(adaptive, extra, successes, idle):
    """A limit the runs never reached says nothing about the room above it (TCP grows only a full window)."""
    limit = adaptive.min + extra
    busy = max(0, limit - idle)
    state, changes = adapt(AdaptiveState(limit), adaptive, limit + 10, [Signal(False, 1.0)] * successes, 2.0, busy)
    assert state.limit == limit and changes == []


def test_an_overload_resets_the_stretch_of_successes() -> None:
    adaptive = Adaptive(min=1, after=3)
    state, _ = adapt(AdaptiveState(5), adaptive, 10, [Signal(False, 0.0)] * 2 + [Signal(True, None)], 1.0, ALWAYS_FULL)
    assert (state.limit, state.successes, state.reason) == (3, 0, OVERLOADED)
    state, _ = adapt(state, adaptive, 10, [Signal(False, 2.0)] * 2, 2.0, ALWAYS_FULL)
    assert state.limit == 3
    state, changes = adapt(state, adaptive, 10, [Signal(False, 2.0)], 3.0, ALWAYS_FULL)
    assert state.limit == 4 and changes[0].reason == RECOVERED


def test_an_overload_of_a_run_started_before_an_increase_still_counts() -> None:
    """An increase starts no generation: the downstream was full even under the lower limit."""
    adaptive = Adaptive(min=1, after=1)
    raised, _ = adapt(AdaptiveState(4, lowered_at=1.0), adaptive, 10, [Signal(False, 2.0)], 5.0, ALWAYS_FULL)
    assert raised.limit == 5
    cut, changes = adapt(raised, adaptive, 10, [Signal(True, 4.0)], 6.0, ALWAYS_FULL)
    assert cut.limit == 3 and changes[0].reason == OVERLOADED


def test_a_stored_limit_above_a_lowered_ceiling_is_brought_within_it() -> None:
    state, changes = adapt(AdaptiveState(20), Adaptive(min=2), 8, [], 0.0, ALWAYS_FULL)
    assert state.limit == 8 and changes == []


def test_the_settling_point_is_within_one_of_the_capacity() -> None:
    """A downstream that takes 4 at once: the limit cycles 3, 4, 5 (4 +- 1) from a declared 20."""
    adaptive, ceiling, capacity = Adaptive(min=1, after=5), 20, 4
    state, seen, now = AdaptiveState(ceiling), [], 0.0
    for _ in range(400):  # each round: `limit` calls at once, those past the capacity overloaded
        now += 1
        calls = [Signal(index >= capacity, now - 0.5) for index in range(state.limit)]
        state, _ = adapt(state, adaptive, ceiling, calls, now, len(calls))
        seen.append(state.limit)
    assert set(seen[50:]) <= {3, 4, 5}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Adaptive(min=0), "Adaptive.min must be a whole number from 1"),
        (lambda: Adaptive(min=-3), "Adaptive.min must be a whole number from 1"),
        (lambda: Adaptive(min=2, max=1), "Adaptive.max (1) is below Adaptive.min (2)"),
        (lambda: Adaptive(decrease=1.0), "Adaptive.decrease must be a number between 0 and 1"),
        (lambda: Adaptive(decrease=0), "Adaptive.decrease must be a number between 0 and 1"),
        (lambda: Adaptive(increase=0), "Adaptive.increase must be a whole number from 1"),
        (lambda: Adaptive(after=0), "Adaptive.after must be a whole number from 1"),
        (lambda: Adaptive(overloaded_by=(ValueError, "x")), "overloaded_by must be exception types"),  # type: ignore[arg-type]
        (
            lambda: QueueConfig("q", Concurrency(global_limit=3), adaptive=Adaptive(min=4)),
            "queue q: Adaptive.min (4) is above the limit it adapts (3)",
        ),
        (lambda: QueueConfig("q", adaptive=Adaptive(min=1)), "needs a declared limit or Adaptive(max=...)"),
        (
            lambda: QueueConfig(
                "q",
                Concurrency(global_limit=9, partition=Partition(by_args=["k"]), overrides={"k=a": 2}),
                adaptive=Adaptive(min=3),
            ),
            "queue q partition k=a: Adaptive.min (3) is above the limit it adapts (2)",
        ),
        (lambda: QueueConfig("q", Concurrency(global_limit=3), adaptive=1), "adaptive must be a tidegate.Adaptive"),  # type: ignore[arg-type]
    ],
)
def test_bad_declarations_are_refused_by_name(make, message) -> None:
    with pytest.raises(ConfigurationError) as caught:
        make()
    assert message in str(caught.value)


def test_the_declaration_round_trips_through_storage_without_its_exception_types() -> None:
    config = QueueConfig(
        "partner", Concurrency(global_limit=20), adaptive=Adaptive(min=2, max=10, overloaded_by=(TimeoutError,))
    )
    back = queue_from_dict(queue_to_dict(config))
    assert back.adaptive == config.adaptive and back.adaptive is not None and back.adaptive.overloaded_by == ()
    assert "adaptive" not in queue_to_dict(QueueConfig("plain"))  # queues declared before: stored as before


def test_rules_use_the_stored_limit_under_a_live_override_and_within_the_range() -> None:
    config = QueueConfig("partner", Concurrency(global_limit=20), adaptive=Adaptive(min=2, max=10))
    rules = Rules(queues={"partner": config})
    assert rules.queue_limit("partner", "") == 10  # nothing stored: the top of the range
    stored = Rules(queues={"partner": config}, adaptive={"queue:partner": AdaptiveState(4, reason=OVERLOADED)})
    assert stored.queue_limit("partner", "") == 4
    overridden = Rules(queues={"partner": config}, overrides={"queue:partner": 15}, adaptive=stored.adaptive)
    assert overridden.queue_limit("partner", "") == 15  # a live override wins
    assert describe(stored.adaptive["queue:partner"], 10) == "adaptive 4 of 10 (overloaded)"
    assert describe(None, 10) == "adaptive 10 of 10"
