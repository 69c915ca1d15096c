"""The claim's charge (`admit`, on each shape's intervals and bursts worked out once) against `take`.

`admit` charges a run with `domain.rates.charged` on `RateWindows` (keys, intervals and
bursts per shape), not through `take` per run. This replays every decision with `take`
on the `Rate` objects themselves, one run after another in claim order, and requires the
same runs admitted, the same states stored and the same charges recorded: a fast path that
passed the wrong interval or burst, or charged from a stale state, fails it. The same
decision made again on the same rules (their `charge_windows` now filled) must not differ;
and the read's fast refusal (`RateStates.refuses`, whole ns) must answer as `held` does.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidegate.domain.admission import Candidate, LocalUsage, admit
from tidegate.domain.limits import Partition, QueueConfig
from tidegate.domain.rates import Charge, Rate, RateStates, interval, take, to_ns, window_key
from tidegate.domain.scopes import Rules, rate_scope

WINDOWS = st.lists(
    st.builds(
        lambda limit, per, burst: Rate(limit, per, burst=min(burst, limit)),
        st.integers(1, 9),
        st.sampled_from([0.5, 1.0, 60.0]),
        st.integers(1, 9),
    ),
    min_size=1,
    max_size=2,
    unique_by=lambda rate: rate.seconds,
)


@given(
    WINDOWS,
    st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 4)), max_size=12),
    st.floats(1.0, 1e5),
    st.dictionaries(st.sampled_from(["a", "b"]), st.integers(-3 * 10**9, 3 * 10**9)),
)
def test_admit_charges_what_take_charges_run_by_run(
    windows: list[Rate], runs: list[tuple[str, int]], now: float, offsets: dict[str, int]
) -> None:
    config = QueueConfig("api", rate=windows, rate_partition=Partition(by_args=["key"]))
    rules = Rules(queues={"api": config})
    scope = {key: rate_scope("api", f"key={key}") for key in ("a", "b")}
    states = {
        (scope[key], window_key(rate)): to_ns(now) + offset for key, offset in offsets.items() for rate in windows
    }
    candidates = [
        Candidate(f"r{i}", "t", "api", "", {}, 0, float(i), rate_partition=f"key={key}", rate_cost=cost)
        for i, (key, cost) in enumerate(runs)
    ]
    decision = admit(candidates, {}, rules, LocalUsage(), len(runs) + 1, rate_states=states, now=now)
    assert admit(candidates, {}, rules, LocalUsage(), len(runs) + 1, rate_states=states, now=now) == decision

    replay = dict(states)
    admitted, charges = [], {}
    for run in candidates:
        keys = [(rate_scope("api", run.rate_partition), window_key(rate)) for rate in windows]
        taken = take([replay.get(key) for key in keys], windows, run.rate_cost, now)
        if not taken.allowed:
            continue
        admitted.append(run.id)
        charges[run.id] = tuple(
            Charge(key[0], key[1], replay.get(key), after, run.rate_cost, interval(rate), to_ns(now))
            for key, rate, after in zip(keys, windows, taken.states, strict=True)
        )
        replay.update(zip(keys, taken.states, strict=True))
    assert [run.id for run, _ in decision.admitted] == admitted
    assert decision.charges == charges
    assert {**states, **decision.rate_states} == replay


@given(
    WINDOWS,
    st.integers(1, 9),
    st.floats(1.0, 1e5),
    st.lists(st.one_of(st.none(), st.integers(-2, 10)), min_size=2, max_size=2),
    st.integers(-1, 1),
)
def test_the_reads_fast_refusal_answers_as_held_does(
    windows: list[Rate], cost: int, now: float, steps: list[int | None], nudge: int
) -> None:
    """States a few intervals either side of now, and 1 ns either side of the edges."""
    states = {
        ("rate:api", window_key(rate)): to_ns(now) + step * interval(rate) + nudge
        for rate, step in zip(windows, steps, strict=False)
        if step is not None
    }
    read = RateStates(states, now)
    assert read.refuses("rate:api", windows, cost) == (read.held("rate:api", windows, cost) is not None)
    assert not read.refuses("rate:api", (), cost)
