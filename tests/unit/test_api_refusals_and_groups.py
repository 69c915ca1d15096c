"""The submit path's two shortcuts, without a server: repeated refusals and group commit.

`Refusals` repeats the store's refusal of a (task, queue) for less than its
staleness bound, a grace longer only while one request asks the store again,
and never after; `GroupCommit` stores what is pending in one
call per flush, hands each waiter its own outcome, and never leaves one waiting
when the store call itself fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from tidegate.api.group_commit import GroupCommit
from tidegate.api.refusals import GRACE, STALENESS, Refusals
from tidegate.domain.errors import AdmissionRejected, InvalidArgument


def test_a_refusal_is_repeated_for_less_than_the_staleness_bound_and_as_a_fresh_exception() -> None:
    now = [0.0]  # times are set, not summed, so each bound is exact
    refusals: Refusals[str] = Refusals(clock=lambda: now[0])
    key = ("ingest", None)
    refused = AdmissionRejected("queue ingest", 15, 15, 7)
    assert refusals.recent(key) is None
    refusals.remember(key, refused, "checked against")
    now[0] = STALENESS * 0.999
    recent = refusals.recent(key)
    assert recent is not None
    again, known = recent
    assert again is not refused and known == "checked against"  # a repeat is checked as the refused one was
    assert (again.scope, again.active, again.limit, again.retry_after) == ("queue ingest", 15, 15, 7)
    assert refusals.recent(("ingest", "other")) is None  # another request key asks the store
    now[0] = STALENESS
    assert refusals.recent(key) is None, "at the bound the store decides again"


def test_past_the_staleness_one_request_asks_the_store_while_the_others_are_refused_within_the_grace() -> None:
    now = [0.0]
    refusals: Refusals[None] = Refusals(clock=lambda: now[0])
    key = ("ingest", None)
    refusals.remember(key, AdmissionRejected("queue ingest", 15, 15, 7), None)
    now[0] = STALENESS
    assert refusals.recent(key) is None, "the first request past the staleness asks the store"
    with refusals.asking(key):
        assert refusals.recent(key) is not None, "meanwhile the others are refused as before"
        now[0] = STALENESS + GRACE * 0.999
        assert refusals.recent(key) is not None
        now[0] = STALENESS + GRACE
        assert refusals.recent(key) is None, "never past staleness + grace, however long the store takes"
    refusals.remember(key, AdmissionRejected("queue ingest", 15, 15, 7), None)
    refusals.forget(key)  # the store admitted one: there is room
    assert refusals.recent(key) is None


def test_a_group_commit_stores_pending_items_together_and_answers_each_its_own() -> None:
    calls: list[list[int]] = []

    def store(items: Sequence[int]) -> list[int | Exception]:
        calls.append(list(items))
        return [InvalidArgument(f"odd {item}") if item % 2 else item * 10 for item in items]

    async def burst() -> list[int | BaseException]:
        group: GroupCommit[int, int] = GroupCommit(store, max_group=4)
        return await asyncio.gather(*(group(item) for item in range(10)), return_exceptions=True)

    answers = asyncio.run(burst())
    assert [answer if isinstance(answer, int) else str(answer) for answer in answers] == [
        0, "odd 1", 20, "odd 3", 40, "odd 5", 60, "odd 7", 80, "odd 9"
    ]  # fmt: skip
    assert sorted(item for call in calls for item in call) == list(range(10))
    assert max(len(call) for call in calls) == 4 and len(calls) < 10


def test_a_failing_store_call_fails_every_waiter_of_its_group_and_the_next_group_still_runs() -> None:
    def store(items: Sequence[int]) -> list[int | Exception]:
        if 0 in items:
            raise RuntimeError("bug")
        return list(items)

    async def scenario() -> tuple[list[int | BaseException], int]:
        group: GroupCommit[int, int] = GroupCommit(store, max_group=3)
        failed = await asyncio.gather(*(group(item) for item in range(3)), return_exceptions=True)
        return failed, await group(5)

    failed, later = asyncio.run(scenario())
    assert all(isinstance(answer, RuntimeError) for answer in failed)
    assert later == 5


@pytest.mark.parametrize("size", [1, 2])
def test_a_lone_item_is_stored_at_once(size: int) -> None:
    async def scenario() -> list[int]:
        group: GroupCommit[int, int] = GroupCommit(lambda items: list(items))
        return [await group(item) for item in range(size)]

    assert asyncio.run(scenario()) == list(range(size))
