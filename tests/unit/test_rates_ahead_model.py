"""Runs taken ahead under a rate (domain/rates.py: `charged` with a lead, `unspent` keeping the
window's "claimed ahead until"), against a log of the real start instants.

A run taken ahead is charged at `at` with a lead `L` and really starts anywhere in
`[at, at + L]`; a run charged now starts at its charge. Refunds (of a run that never
started) and corrections (of a running one's cost) come in any order, with other
charges after them. The log of real starts is the reference: no window of length
`per` holds more than the limit. Each half of the rule taken out (the lead not
counted in the charge; a refund not keeping the claimed-ahead-until) is a mutation
the same model must catch.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_rates_model import Log, most_in_a_window, rates
from tidegate.domain.rates import (
    NS,
    Charge,
    Rate,
    ahead_lead,
    charged,
    correct,
    interval,
    refund,
    roomy,
    to_ns,
    unspent,
)

# One of: a start charged now; a run taken ahead (its lead as a share of the largest lead the windows
# allow or a little past it, and where in the lead it really starts); a refund of a kept run; a
# correction of a kept run's cost (pick: which kept run, modulo their number).
shares = st.sampled_from([Fraction(0), Fraction(1, 3), Fraction(1), Fraction(3, 2), Fraction(3)])
operations = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.integers(0, 300).map(lambda ms: Fraction(ms, 100)), st.integers(1, 4)),
        st.tuples(
            st.just("ahead"),
            st.integers(0, 300).map(lambda ms: Fraction(ms, 100)),
            st.integers(1, 4),
            shares,
            st.sampled_from([Fraction(0), Fraction(1, 2), Fraction(1)]),
        ),
        st.tuples(st.just("refund"), st.integers(0, 30).map(lambda ms: Fraction(ms, 100)), st.integers(0, 50)),
        st.tuples(st.just("correct"), st.integers(0, 30).map(lambda ms: Fraction(ms, 100)), st.integers(0, 50)),
    ),
    min_size=1,
    max_size=60,
)


def replay(
    rate_list: list[Rate], ops: list[tuple], new_costs: list[int], *, count_lead: bool = True, keep_ahead: bool = True
) -> tuple[Log, bool]:
    """Apply `ops` to the stored states; return the log of real starts of the runs kept and
    whether a correction raised a cost (a start that already happened may then pass the limit).
    `count_lead` and `keep_ahead` off are the mutations."""
    steps = [interval(rate) for rate in rate_list]
    bursts = [rate.allowed_burst for rate in rate_list]
    largest = max(burst * step for step, burst in zip(steps, bursts, strict=True))
    states: list[int | None] = [None] * len(rate_list)
    ahead_until: int | None = None  # the windows' "claimed ahead until" (one scope: the same for each)
    kept: dict[int, tuple[Fraction, int, list[Charge]]] = {}  # run -> (real start, cost, charges)
    now, raised, costs = Fraction(0), False, iter(new_costs)
    for number, (kind, gap, value, *ahead) in enumerate(ops):
        now += gap
        at = to_ns(float(now))
        if kind in ("start", "ahead"):
            lead, where = (int(ahead[0] * largest), ahead[1]) if kind == "ahead" else (0, Fraction(0))
            after = charged(states, steps, bursts, value, at, lead if count_lead else 0)
            if after is None:
                continue
            charges = [
                Charge("rate:q", 0, before, new, value, step, at)
                for before, new, step in zip(states, after, steps, strict=True)
            ]
            states = list(after)
            if lead:
                ahead_until = max(ahead_until or 0, at + lead)
            kept[number] = (Fraction(at + int(where * lead), NS), value, charges)
            continue
        if not kept:
            continue
        chosen = sorted(kept)[value % len(kept)]
        start, cost, charges = kept[chosen]
        keep = ahead_until if keep_ahead else None
        if kind == "refund":
            states = [refund(state, charge, float(now), keep) for state, charge in zip(states, charges, strict=True)]
            del kept[chosen]
        else:
            new_cost = next(costs, 0)
            raised |= new_cost > cost
            corrected = [
                correct(state, charge, new_cost, float(now), keep)
                for state, charge in zip(states, charges, strict=True)
            ]
            states = [state for state, _ in corrected]
            kept[chosen] = (start, new_cost, [charge for _, charge in corrected])
    return sorted((start, cost) for start, cost, _ in kept.values() if cost), raised


def holds(rate_list: list[Rate], ops: list[tuple], new_costs: list[int], **mutation: bool) -> None:
    log, raised = replay(rate_list, ops, new_costs, **mutation)
    if not raised:
        for rate in rate_list:
            assert most_in_a_window(log, Fraction(rate.seconds)) <= rate.limit, (rate, log)


window_lists = st.lists(rates, min_size=1, max_size=2, unique_by=lambda r: r.seconds)
new_costs = st.lists(st.integers(0, 5), max_size=60)


@settings(max_examples=400, deadline=None)
@given(window_lists, operations, new_costs)
def test_runs_taken_ahead_starting_anywhere_in_their_lead_never_pass_the_limit_at_their_real_starts(
    rate_list, ops, costs
):
    holds(rate_list, ops, costs)


# The mutation search: the same operations on a coarse grid of small windows, where a window
# filled to its limit (what a mutation needs to pass it) comes up often.
small_rates = st.integers(1, 5).flatmap(
    lambda limit: st.builds(Rate, st.just(limit), st.just(1), st.integers(1, limit))
)
grid = st.sampled_from([Fraction(0), Fraction(1, 10), Fraction(1, 4), Fraction(1, 2), Fraction(1)])
small_operations = st.lists(
    st.one_of(
        st.tuples(st.just("start"), grid, st.just(1)),
        st.tuples(
            st.just("ahead"), grid, st.just(1), shares, st.sampled_from([Fraction(0), Fraction(1, 2), Fraction(1)])
        ),
        st.tuples(st.just("refund"), grid, st.integers(0, 3)),
    ),
    min_size=2,
    max_size=10,
)
# The refund's half needs a window filled to its limit right after a refund that crosses a lead,
# rarer than hypothesis finds in a few thousand examples: a plain random search over the same
# grid (200,000 tries) found this one. The refund of an earlier start, after a run was taken
# ahead, drops the state below the lead that run stands on.
NO_KEEP = [
    ("start", Fraction(1, 10), 1),
    ("start", Fraction(1), 1),
    ("refund", Fraction(1, 4), 2),
    ("ahead", Fraction(0), 1, Fraction(1, 3), Fraction(1, 2)),
    ("start", Fraction(0), 1),
    ("refund", Fraction(1, 10), 2),
    ("start", Fraction(1), 1),
    ("start", Fraction(1, 10), 1),
]


def test_the_lead_not_counted_in_the_charge_is_caught():
    """The mutation check of the charge's half: with the lead not counted, the same model finds a
    window of real starts past the limit."""

    @settings(max_examples=5000, deadline=None, database=None)
    @given(small_rates.map(lambda rate: [rate]), small_operations)
    def mutated(rate_list, ops):
        holds(rate_list, ops, [], count_lead=False)

    with pytest.raises(AssertionError):
        mutated()


def test_a_refund_not_keeping_the_claimed_ahead_until_is_caught():
    """The mutation check of the refund's half, on the counterexample the search found."""
    rate_list = [Rate(limit=2, per=1, burst=2)]
    holds(rate_list, NO_KEEP, [])
    with pytest.raises(AssertionError):
        holds(rate_list, NO_KEEP, [], keep_ahead=False)


def test_a_refund_keeps_the_lead_a_run_taken_ahead_was_charged_with():
    """Two runs taken ahead at 0 with a lead of 0.5 s; the second is handed back at 0.1 s. The
    first may still start at 0.5 s: the state keeps 0.5 s plus its own cost, not 0.1 s."""
    rate = Rate(limit=10, per=1, burst=5)
    step, burst, lead = interval(rate), 5, NS // 2
    first = charged([None], [step], [burst], 1, 0, lead)
    second = charged(first, [step], [burst], 1, 0, lead)
    assert first == (lead + step,) and second == (lead + 2 * step,)
    charge = Charge("rate:q", 0, first[0], second[0], 1, step, 0)
    assert refund(second[0], charge, 0.1, lead) == lead + step
    assert unspent(charge, 0.1, None) == step  # exact where nothing was claimed ahead
    # without the kept lead, a refund of the first at 0.1 s would drop the state to 0.1 s
    alone = Charge("rate:q", 0, None, first[0], 1, step, 0)
    assert refund(first[0], alone, 0.1) == to_ns(0.1) and refund(first[0], alone, 0.1, lead) == lead


def test_ahead_lead_is_half_the_smallest_burst_span_capped_and_roomy_is_half_the_burst_used():
    fast, slow = Rate(limit=1_000_000, per=1), Rate(limit=60, per="1m", burst=3)
    steps = [interval(fast), interval(slow)]
    bursts = [fast.allowed_burst, slow.allowed_burst]
    assert ahead_lead(steps[:1], bursts[:1], NS) == fast.allowed_burst // 2 * steps[0]
    assert ahead_lead(steps[1:], bursts[1:], NS // 4) == NS // 4  # capped
    assert ahead_lead(steps, bursts, NS) == min(fast.allowed_burst // 2 * steps[0], NS)
    assert ahead_lead([interval(Rate(limit=5, per=1, burst=1))], [1], NS) == 0  # a burst of 1: none ahead
    half = fast.allowed_burst // 2 * steps[0]
    assert roomy([None, None], steps, bursts, 0) and roomy([half], steps[:1], bursts[:1], 0)
    assert not roomy([half + 1], steps[:1], bursts[:1], 0)


@settings(max_examples=1500, deadline=None)
@given(small_rates.map(lambda rate: [rate]), small_operations)
def test_on_the_mutation_search_grid_the_rule_holds(rate_list, ops):
    """Where the mutations are found, the rule itself finds nothing."""
    holds(rate_list, ops, [])
