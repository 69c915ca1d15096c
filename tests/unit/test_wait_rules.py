"""The slot rules of a waiting parent (`domain/waits.py`), one example per rule.

The reference's three situations, the recursive bound, `release_all`, and the
chain deadlock beyond the reference; `test_wait_rules_model.py` checks the same
function against a simulator over random trees.
"""

from __future__ import annotations

import pickle

import pytest

import tidegate
from tidegate.domain.errors import InvalidArgument, RecursiveWaitDeadlock, WaitDeadlock
from tidegate.domain.waits import Slot, Waiter, WaitPlan, plan_wait


def on(queue: str, limit: int | None, *, cap: int | None = 1, **tags: int) -> list[Slot]:
    """A run's slots: the global cap, its queue, and one tag scope per keyword (value = limit)."""
    slots = [Slot("global", cap), Slot(f"queue:{queue}", limit)]
    return slots + [Slot(f"tag:{key}", limit) for key, limit in tags.items()]


def waiter(run_id: str, kept: set[str], released: set[str]) -> Waiter:
    return Waiter(run_id, frozenset(kept), frozenset(released))


def test_other_queue_releases_global_and_keeps_the_queue_slot():
    """Reference situation 1: environment limit 1, child on another queue: the child can run (global
    released) and another run of the parent's queue still waits (queue slot kept)."""
    plan = plan_wait("p", on("a", 1), [on("b", 1)], [])
    assert plan == WaitPlan(released=frozenset({"global"}), kept=frozenset({"queue:a"}))


def test_same_queue_of_limit_one_releases_the_queue_slot():
    """Reference situation 2: parent and child on one queue of limit 1: the child runs."""
    plan = plan_wait("p", on("a", 1), [on("a", 1)], [])
    assert plan == WaitPlan(released=frozenset({"global", "queue:a"}), kept=frozenset())


def test_recursive_chain_past_the_limit_fails_with_the_chain():
    """Reference situation 3: p waits on c, c on g, all on queue a of limit 1: c's wait would be
    the second release of queue:a along the chain."""
    ancestors = [waiter("p", set(), {"global", "queue:a"})]
    with pytest.raises(RecursiveWaitDeadlock) as caught:
        plan_wait("c", on("a", 1), [on("a", 1)], ancestors)
    error = caught.value
    assert (error.code, error.scope, error.chain, error.limit) == ("RECURSIVE_WAIT_DEADLOCK", "queue:a", ("p", "c"), 1)
    assert "queue:a" in str(error) and "p -> c" in str(error)


def test_recursive_bound_allows_limit_deep_releases():
    ancestors = [waiter("r", set(), {"global", "queue:a"}), waiter("p", set(), {"global", "queue:a"})]
    plan = plan_wait("c", on("a", 3), [on("a", 3)], ancestors)
    assert plan.released == {"global", "queue:a"}
    with pytest.raises(RecursiveWaitDeadlock):
        plan_wait("c", on("a", 2), [on("a", 2)], ancestors)


def test_global_is_released_at_any_depth():
    ancestors = [waiter(f"r{i}", {"queue:a"}, {"global"}) for i in range(50)]
    assert plan_wait("c", on("a", None, cap=1), [on("b", 1)], ancestors).released == {"global"}


def test_tag_slots_follow_the_queue_rule():
    """A shared tag scope is released (bounded by its limit); a tag no child needs is kept."""
    plan = plan_wait("p", on("a", 5, env=1, team=2), [on("b", 5, env=1)], [])
    assert plan.released == {"global", "tag:env"}
    assert plan.kept == {"queue:a", "tag:team"}
    ancestors = [waiter("r", set(), {"global", "tag:env"})]
    with pytest.raises(RecursiveWaitDeadlock) as caught:
        plan_wait("p", on("a", 5, env=1), [on("b", 5, env=1)], ancestors)
    assert caught.value.scope == "tag:env"


def test_partition_is_its_own_scope():
    """Another partition of the same queue is another scope: the parent keeps its lane."""
    parent = [Slot("global", None), Slot("queue:a/key=1", 1)]
    plan = plan_wait("p", parent, [[Slot("global", None), Slot("queue:a/key=2", 1)]], [])
    assert plan.kept == {"queue:a/key=1"}


def test_one_child_of_a_batch_on_the_same_queue_releases_the_slot():
    plan = plan_wait("p", on("a", 1), [on("b", 1), on("a", 1), on("c", None)], [])
    assert plan.released == {"global", "queue:a"}


def test_cross_queue_chain_keeping_the_scope_is_a_wait_deadlock():
    """Beyond the reference: p on a (limit 1) keeps a while it waits on c on b; c then waits on g on a:
    g could never start, because the one slot of a is kept by its own waiting grandparent."""
    first = plan_wait("p", on("a", 1), [on("b", 1)], [])
    ancestors = [Waiter("p", first.kept, first.released)]
    with pytest.raises(WaitDeadlock) as caught:
        plan_wait("c", on("b", 1), [on("a", 1)], ancestors)
    error = caught.value
    assert (error.code, error.scope, error.chain, error.holders) == ("WAIT_DEADLOCK", "queue:a", ("p", "c"), ("p",))
    assert "queue:a" in str(error) and "p -> c" in str(error)


def test_scope_kept_below_its_limit_is_not_a_deadlock():
    ancestors = [waiter("p", {"queue:a"}, {"global"})]
    assert plan_wait("c", on("b", 1), [on("a", 2)], ancestors).kept == {"queue:b"}


def test_unlimited_scopes_never_deadlock():
    ancestors = [waiter("p", {"queue:a"}, {"global"})]
    assert plan_wait("c", on("b", 1), [on("a", None)], ancestors).kept == {"queue:b"}


def test_release_all_releases_every_slot():
    plan = plan_wait("p", on("a", 1, env=1), [on("b", 1)], [], release_all=True)
    assert plan == WaitPlan(released=frozenset({"global", "queue:a", "tag:env"}), kept=frozenset())


def test_release_all_still_bounds_what_a_child_needs():
    ancestors = [waiter("p", set(), {"global", "queue:a"})]
    with pytest.raises(RecursiveWaitDeadlock):
        plan_wait("c", on("a", 1), [on("a", 1)], ancestors, release_all=True)


def test_release_all_keeps_an_unneeded_slot_the_bound_will_not_let_go():
    """c's child is on b, so nobody needs c's slot of a: c keeps it rather than being refused."""
    ancestors = [waiter("p", set(), {"global", "queue:a"})]
    plan = plan_wait("c", on("a", 1), [on("b", 1)], ancestors, release_all=True)
    assert plan == WaitPlan(released=frozenset({"global"}), kept=frozenset({"queue:a"}))


def test_release_all_higher_up_avoids_the_cross_queue_deadlock():
    first = plan_wait("p", on("a", 1), [on("b", 1)], [], release_all=True)
    ancestors = [Waiter("p", first.kept, first.released)]
    assert plan_wait("c", on("b", 1), [on("a", 1)], ancestors).kept == {"queue:b"}


def test_limits_that_disagree_use_the_tightest():
    ancestors = [waiter("p", set(), {"global", "queue:a"})]
    with pytest.raises(RecursiveWaitDeadlock):
        plan_wait("c", on("a", 2), [on("a", 1)], ancestors)


def test_malformed_chains_are_refused_by_name():
    with pytest.raises(InvalidArgument, match="twice"):
        plan_wait("p", [Slot("queue:a", 1), Slot("queue:a", 1)], [], [])
    with pytest.raises(InvalidArgument, match="repeats"):
        plan_wait("p", on("a", 1), [on("a", 1)], [waiter("p", set(), set())])


def test_errors_are_exported_with_their_codes_and_survive_pickling():
    recursive = tidegate.RecursiveWaitDeadlock("queue:a", ("p", "c"), 1)
    deadlock = tidegate.WaitDeadlock("queue:a", ("p", "c"), 1, ("p",))
    for error in (recursive, deadlock):
        assert isinstance(error, tidegate.TidegateError)
        copy = pickle.loads(pickle.dumps(error))
        assert (type(copy), str(copy), copy.code) == (type(error), str(error), error.code)
    assert (recursive.code, deadlock.code) == ("RECURSIVE_WAIT_DEADLOCK", "WAIT_DEADLOCK")
