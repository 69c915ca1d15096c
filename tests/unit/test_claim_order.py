"""`claim_order` without fair queues is one sort by (resumed first, priority desc, age, id).

The fast path returns that sort without ranking lanes; with a fair queue among the candidates the
lanes are ranked. Both are pinned here against the documented order, so a fast path that kept the
read order, or ranked a priority queue's partitions as lanes, fails.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidegate.domain.admission import Candidate, claim_order


@st.composite
def candidates(draw: st.DrawFn, orderings: tuple[str, ...]) -> list[Candidate]:
    size = draw(st.integers(0, 12))
    return [
        Candidate(
            id=f"r{n:02d}",
            task="t",
            queue=draw(st.sampled_from(["a", "b"])),
            partition=draw(st.sampled_from(["", "p1", "p2"])),
            tags={},
            priority=draw(st.integers(0, 2)),
            scheduled_at=float(draw(st.integers(0, 5))),
            ordering=draw(st.sampled_from(orderings)),
            resumed=draw(st.booleans()),
        )
        for n in range(size)
    ]


@given(candidates(("priority",)), st.permutations(range(12)))
def test_without_fair_queues_the_order_is_resumed_priority_age_id(found, shuffle):
    read = [found[i] for i in shuffle if i < len(found)]
    expected = sorted(found, key=lambda c: (not c.resumed, -c.priority, c.scheduled_at, c.id))
    assert claim_order(read) == expected


def test_a_fair_queue_takes_its_partitions_in_turns():
    def run(n: int, partition: str, at: float) -> Candidate:
        return Candidate(f"r{n}", "t", "a", partition, {}, 0, at, ordering="fair")

    found = [run(1, "p1", 1.0), run(2, "p1", 2.0), run(3, "p1", 3.0), run(4, "p2", 4.0)]
    assert [c.id for c in claim_order(found)] == ["r1", "r4", "r2", "r3"]
    # p2 runs two already: it ranks 2, behind p1's first two, and a tie goes to the older lane
    assert [c.id for c in claim_order(found, {("a", "p2"): 2})] == ["r1", "r2", "r3", "r4"]
