"""Cycles of waits across chains (`domain/wait_graph.py`), which `plan_wait` alone cannot see.

`test_wait_rules_model.py` checks the same functions against a simulator over random trees.
"""

from __future__ import annotations

import pickle

import pytest

from tidegate.domain.errors import WaitCycle, WaitDeadlock
from tidegate.domain.wait_graph import Blocked, never_ending, refuse_stuck_wait
from tidegate.domain.waits import Slot, plan_wait

LIMITS = {"global": None, "queue:a": 1, "queue:b": 1, "queue:c": None}


def waiting(run_id: str, kept: set[str], awaits: set[str], released: set[str] | None = None) -> Blocked:
    return Blocked(run_id, frozenset(kept), frozenset(released or {"global"}), frozenset(awaits))


def queued(run_id: str, *scopes: str) -> Blocked:
    return Blocked(run_id, frozenset(), frozenset(("global", *scopes)))


def test_siblings_keeping_what_each_other_needs_deadlock_across_chains():
    """r waits on c1 (queue a) and c2 (queue b). c1 waits on g1 (queue b), keeping a; c2 then waits on
    g2 (queue a), keeping b. Each chain alone is fine, so plan_wait accepts c2's wait; the graph does not."""
    root = waiting("r", set(), {"c1", "c2"}, {"global"})
    c1, g1 = waiting("c1", {"queue:a"}, {"g1"}), queued("g1", "queue:b")
    plan = plan_wait("c2", [Slot("global", None), Slot("queue:b", 1)], [[Slot("queue:a", 1)]], [])
    assert plan.kept == {"queue:b"}
    c2, g2 = Blocked("c2", plan.kept, plan.released, frozenset({"g2"})), queued("g2", "queue:a")
    graph = [root, c1, g1, c2, g2]
    assert never_ending(graph, LIMITS) == {"r", "c1", "g1", "c2", "g2"}
    with pytest.raises(WaitDeadlock) as caught:
        refuse_stuck_wait("c2", graph, LIMITS)
    error = caught.value
    assert (error.scope, error.holders, error.chain) == ("queue:a", ("c1",), ("c2", "g2", "c1", "g1"))
    assert "c2 -> g2 -> c1 -> g1" in str(error) and "queue:a" in str(error)


def test_a_keeper_that_will_resume_is_no_deadlock():
    """c1 keeps a, but its child g1 can run (b is free): c1 will end and free a for g2."""
    graph = [waiting("c1", {"queue:a"}, {"g1"}), queued("g1", "queue:c"), waiting("c2", {"queue:b"}, {"g2"})]
    graph.append(queued("g2", "queue:a"))
    assert never_ending(graph, LIMITS) == set()
    refuse_stuck_wait("c2", graph, LIMITS)


def test_a_running_child_outside_the_graph_will_end():
    graph = [waiting("c1", {"queue:a"}, {"running-child"}), waiting("c2", {"queue:b"}, {"g2"}), queued("g2", "queue:a")]
    assert never_ending(graph, LIMITS) == set()


def test_room_left_beside_stuck_keepers_is_no_deadlock():
    limits = {**LIMITS, "queue:a": 2}
    graph = [waiting("c1", {"queue:a"}, {"g1"}), queued("g1", "queue:b"), waiting("c2", {"queue:b"}, {"g2"})]
    graph.append(queued("g2", "queue:a"))
    assert never_ending(graph, limits) == set()


def test_a_resuming_parent_blocked_by_a_cycle_is_stuck():
    """p released a and must take it again to resume; q keeps a and waits on g, which needs b kept by p."""
    graph = [
        Blocked("p", frozenset({"queue:b"}), frozenset({"global", "queue:a"})),
        waiting("q", {"queue:a"}, {"g"}),
        queued("g", "queue:b"),
    ]
    assert never_ending(graph, LIMITS) == {"p", "q", "g"}


def test_a_paused_scope_is_not_a_deadlock():
    """Limit 0 and nobody keeping it: an operator's pause; raising the limit lets the child in."""
    graph = [waiting("p", set(), {"c"}), queued("c", "queue:z")]
    assert never_ending(graph, {**LIMITS, "queue:z": 0}) == set()
    refuse_stuck_wait("p", graph, {**LIMITS, "queue:z": 0})


def test_a_circle_of_awaits_alone_is_a_wait_cycle():
    """Links of unique children can close a circle no slot is part of: p1 awaits p2 (it holds the
    key p1's child asked for), p2 now awaits p1. Nothing is kept, yet neither can ever go on."""
    p1, p2 = waiting("p1", set(), {"p2"}), waiting("p2", set(), {"p1"})
    assert never_ending([p1, p2], LIMITS) == {"p1", "p2"}
    with pytest.raises(WaitCycle) as caught:
        refuse_stuck_wait("p2", [p1, p2], LIMITS)
    assert caught.value.chain == ("p2", "p1", "p2") and caught.value.code == "WAIT_CYCLE"
    assert isinstance(caught.value, WaitDeadlock) and "p2 -> p1 -> p2" in str(caught.value)
    pickled = pickle.loads(pickle.dumps(caught.value))
    assert (type(pickled), pickled.chain) == (WaitCycle, caught.value.chain)


def test_a_parent_awaiting_itself_is_a_wait_cycle():
    with pytest.raises(WaitCycle) as caught:
        refuse_stuck_wait("p", [waiting("p", set(), {"p"})], LIMITS)
    assert caught.value.chain == ("p", "p")
