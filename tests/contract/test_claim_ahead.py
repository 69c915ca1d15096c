"""Runs claimed ahead of a worker's free slots: any where no limit applies, under a limit only
while it has room (mutation checks).

A worker whose runs end fast asks a cycle to claim more than its free slots
(`CycleRequest.claim_ahead`): those runs wait on the worker for a slot, and run
while its next cycle is in flight. A free claim (`ClaimPlan.free`: no limit,
per-worker cap or fair order on its queues) takes them all; any other takes its
free slots' worth and, past them, only runs `admit` lets wait ahead
(`domain.ahead.WorkerRoom`): under a queue's rate only with a lead, and in every scope at most
half the room it found, so a limit with room never fills with runs that wait for a
slot; with no free slot, none. Each rule is taken out here to see the runs a
limited claim would then take. Both adapters; on PostgreSQL the free claim is one
statement, and a claim after the rules changed under it takes the general path.
"""

from __future__ import annotations

import pytest

from tidegate import App, Rate, RunQueueConfig, TagRateLimit
from tidegate.domain import ahead, claim_plan, rate_charger
from tidegate.domain.model import CycleRequest

from .conftest import LEASE, enqueue_one

FREE, LIMITED = "ahead.free", "ahead.limited"
MUTATION = pytest.mark.parametrize("removed", [False, True], ids=["intact", "removed"])


def _claim(store, queue: str, limit: int, ahead: int) -> int:
    return len(store.cycle(CycleRequest("w1", [queue], [], [], limit, LEASE, ahead)).claimed)


def _remove_half_the_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutation: a run is taken ahead wherever its scopes have a free slot; and the claim's reads
    lose the bound that rule puts on them under a binding queue limit (`ClaimPlan.most_ahead`)."""
    monkeypatch.setattr(ahead.WorkerRoom, "leaves_room", lambda *_: True)
    monkeypatch.setattr(claim_plan.ClaimPlan, "most_ahead", None)


def test_a_free_claim_takes_the_runs_ahead_too(store):
    for _ in range(6):
        enqueue_one(store, FREE)
    assert _claim(store, FREE, 2, 0) == 2  # rules cached: the next claim is free on both paths
    assert _claim(store, FREE, 3, 2) == 3
    assert _claim(store, FREE, 3, 3) == 1  # none free, all ahead: the last run


@MUTATION
def test_a_limited_claim_takes_runs_ahead_while_the_limit_keeps_half_its_room(store, monkeypatch, removed):
    """Queue limit 10, 1 in use: a claim of 4 (3 ahead) takes them all (room 9: 1 for the free
    slot, then 3 ahead leave 5). Then 5 in use: a claim of 4 (3 ahead) takes its free slot and 2
    ahead (room 4 after the free slot: 2 ahead leave 2), without the bound 4 (the limit full, 3
    runs waiting); with no free slot it takes none."""
    store.set_limit(f"queue:{LIMITED}", 10)
    for _ in range(14):
        enqueue_one(store, LIMITED)
    assert _claim(store, LIMITED, 1, 0) == 1  # rules cached
    if removed:
        _remove_half_the_room(monkeypatch)
    taken = [_claim(store, LIMITED, 4, 3), _claim(store, LIMITED, 4, 3), _claim(store, LIMITED, 3, 3)]
    assert taken == ([4, 4, 0] if removed else [4, 3, 0]), taken


@MUTATION
def test_a_limit_set_after_the_rules_were_cached_keeps_half_its_room(store, database_url, monkeypatch, removed):
    """The worker's store cached "no limit"; another store then limits the queue to 4 (the run
    claimed before holds no slot of it). On PostgreSQL the one-statement claim refuses on the
    changed rules, and the general claim takes the 2 free slots and 1 ahead (room 2 after the
    free slots: 1 ahead leaves 1); without the bound 2 ahead, the limit full."""
    from tidegate.bootstrap import open_store

    for _ in range(6):
        enqueue_one(store, FREE)
    assert _claim(store, FREE, 1, 0) == 1  # caches the rules: no limit
    other = open_store(database_url)
    try:
        other.set_limit(f"queue:{FREE}", 4)
    finally:
        other.close()
    if removed:
        _remove_half_the_room(monkeypatch)
    taken = _claim(store, FREE, 4, 2)
    assert taken == (4 if removed else 3), taken


def test_a_rated_queue_takes_runs_ahead_with_a_lead(database_url):
    """A queue rate that never binds (a million a second, burst 50,000): a claim of 4, 3 of them
    ahead, takes all 4; the 3 ahead carry the lead their charge allows (half the burst's span,
    26 ms, under LEAD_CAP_NS), the one for the free slot none."""
    with App(database_url) as app:
        app.queue("ahead.rated", rate=Rate(limit=1_000_000, per="1s"))
        work = app.task(name="ahead.rated", queue="ahead.rated")(lambda n: n)
        work.submit_many([{"n": n} for n in range(8)])
        assert _claim(app.store, "ahead.rated", 1, 0) == 1  # rules cached
        claimed = app.store.cycle(CycleRequest("w1", ["ahead.rated"], [], [], 4, LEASE, 3)).claimed
        step = 10**9 // (1_000_000 + 1 - 50_000) + 1  # the window's interval in ns, rounded up
        assert [run.lead for run in claimed[:1]] == [None]
        assert [round(run.lead, 4) for run in claimed[1:]] == [round(25_000 * step / 10**9, 4)] * 3


@MUTATION
def test_a_rate_past_half_its_burst_takes_none_ahead(database_url, monkeypatch, removed):
    """Rate(60, '1m', burst=10): 7 starts charged, so its window has used more than half its burst:
    a claim of 4, 3 ahead, takes its free slot only, charged as if none ever went ahead. Without
    the rule (`rates.roomy`) the lead's own check still lets 2 more through ahead."""
    if removed:
        monkeypatch.setattr(rate_charger, "roomy", lambda *_: True)
    with App(database_url) as app:
        app.queue("ahead.busy", rate=Rate(limit=60, per="1m", burst=10))
        work = app.task(name="ahead.busy", queue="ahead.busy")(lambda n: n)
        work.submit_many([{"n": n} for n in range(12)])
        assert _claim(app.store, "ahead.busy", 7, 0) == 7
        claimed = app.store.cycle(CycleRequest("w1", ["ahead.busy"], [], [], 4, LEASE, 3)).claimed
        assert len(claimed) == (3 if removed else 1)


@MUTATION
def test_a_run_a_tag_rate_charges_is_not_taken_ahead(database_url, monkeypatch, removed):
    """A tag rate that never binds, on tenant=acme only, in a queue with no limit of its own: a
    claim of 4, 3 ahead, takes its free slot and then only the runs of other tenants ahead: a tag's
    rate is charged outside any queue's claim turn, so no lead of it is recharged; without the rule
    (`RateCharger.ahead_lead`) the acme runs too."""
    if removed:
        monkeypatch.setattr(rate_charger.RateCharger, "ahead_lead", lambda *_: 0)
    tag_rate = TagRateLimit(key="tenant", value="acme", limit=1_000_000, per="1s")
    with App(database_url, run_queue=RunQueueConfig(tag_rate_limits=[tag_rate])) as app:
        work = app.task(name="ahead.tagged", queue="ahead.tagged")(lambda n: n)
        for n, tenant in enumerate(["acme", "acme", "acme", "globex", "acme", "acme"]):
            work.options(tags={"tenant": tenant}).submit(n=n)  # one by one: a strict claim order
        assert _claim(app.store, "ahead.tagged", 1, 0) == 1  # rules cached: acme's first run
        claimed = app.store.cycle(CycleRequest("w1", ["ahead.tagged"], [], [], 4, LEASE, 3)).claimed
        assert sorted(run.args["n"] for run in claimed) == ([1, 2, 3, 4] if removed else [1, 3])
