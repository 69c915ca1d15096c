"""Block reasons and `queue why`, on both adapters, driven through the store's own verbs.

Claims are made with `store.cycle` under made-up worker ids, so every pass
is explicit: which scopes were full, what the run row says, which events were
written, and what `engine.operators.why.explain` tells an operator.
"""

from __future__ import annotations

import pytest

from tidegate import App, Concurrency, RunNotFound, RunQueueConfig, RunStatus, TagConcurrencyLimit
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind
from tidegate.engine.operators import limits as live
from tidegate.engine.operators.why import explain

QUEUE = "br"


@pytest.fixture
def gated(database_url):
    application = App(
        database_url,
        run_queue=RunQueueConfig(
            max_concurrent_runs=1,
            tag_concurrency_limits=[TagConcurrencyLimit(key="env", value="prod", limit=1)],
        ),
    )
    application.queue(QUEUE, concurrency=Concurrency(global_limit=1))

    @application.task(name="br.work", queue=QUEUE)
    def work(n: int) -> int:
        return n

    try:
        yield application
    finally:
        application.close()


def _pass(store, worker="claimer", limit=5):
    return store.cycle(CycleRequest(worker, [QUEUE], [], [], limit, 60)).claimed


def _blocked_events(store, run_id):
    return [e for e in store.run_events(run_id) if e.type == "RunBlocked"]


def _reason(*scopes):
    return [{"scope": scope, "used": used, "limit": limit} for scope, used, limit in scopes]


def test_a_skipped_run_records_every_saturated_scope_once_per_change_and_clears_on_claim(gated):
    store = gated.store
    work = gated.tasks["br.work"]
    first = work.options(tags={"env": "prod"}).submit(n=1)
    second = work.options(tags={"env": "prod"}).submit(n=2)
    other = work.options(tags={"env": "dev"}).submit(n=3)
    assert first.info().block_reason is None

    [claimed] = _pass(store, "holder", limit=1)
    assert claimed.id == first.id
    assert store.scope_usage() == {"global": 1, "queue:br": 1, "tag:env=prod": 1}

    for _ in range(4):  # several claim passes with nothing changed
        assert _pass(store) == []
    everything_full = _reason(("global", 1, 1), ("queue:br", 1, 1), ("tag:env=prod", 1, 1))
    assert second.info().block_reason == everything_full
    assert other.info().block_reason == _reason(("global", 1, 1), ("queue:br", 1, 1))
    events = _blocked_events(store, second.id)
    assert len(events) == 1, "RunBlocked is written when the reason changes, not on every pass"
    assert events[0].metadata["blocked_by"] == everything_full

    # raising the global cap changes the reason: one more event, with the new reason
    live.set_limit(store, "global", 5)
    for _ in range(3):
        assert _pass(store) == []
    assert second.info().block_reason == _reason(("queue:br", 1, 1), ("tag:env=prod", 1, 1))
    assert other.info().block_reason == _reason(("queue:br", 1, 1))
    events = _blocked_events(store, second.id)
    assert [e.metadata["blocked_by"] for e in events] == [
        everything_full,
        _reason(("queue:br", 1, 1), ("tag:env=prod", 1, 1)),
    ]
    assert len(_blocked_events(store, other.id)) == 2

    # the holder finishes; the next pass claims `second` and clears its reason
    result = store.cycle(
        CycleRequest("holder", [QUEUE], [], [Outcome(first.id, 1, OutcomeKind.COMPLETED, result=1)], 0, 60)
    )
    assert result.fenced_out == []
    assert store.scope_usage() == {}
    [claimed] = _pass(store, limit=1)
    assert claimed.id == second.id
    record = second.info()
    assert record.status is RunStatus.RUNNING
    assert record.block_reason is None
    types = [e.type for e in store.run_events(second.id)]
    assert types[-1] == "RunDequeued" and types.count("RunBlocked") == 2
    # `other` is still blocked by the queue (now held by `second`): same reason, no new event
    assert _pass(store) == []
    assert other.info().block_reason == _reason(("queue:br", 1, 1))
    assert len(_blocked_events(store, other.id)) == 2


def test_explain_gives_position_checks_and_the_holders_of_the_blocking_scope(gated):
    store = gated.store
    work = gated.tasks["br.work"]
    holder = work.options(tags={"env": "prod"}).submit(n=0)
    [claimed] = _pass(store, "holder-worker", limit=1)
    assert claimed.id == holder.id
    waiting = [work.options(tags={"env": "prod"}).submit(n=i) for i in range(1, 4)]
    urgent = work.options(priority=5, tags={"env": "dev"}).submit(n=9)

    why = explain(store, waiting[1].id)
    assert (why.position, why.queued_in_queue) == (3, 4)  # behind `urgent` (priority) and waiting[0] (age)
    assert [(c.scope, c.label, c.used, c.limit, c.ok) for c in why.checks] == [
        ("global", "max_concurrent_runs", 1, 1, False),
        ("queue:br", "queue br", 1, 1, False),
        ("tag:env=prod", "tag env=prod", 1, 1, False),
    ]
    assert [c.scope for c in why.blocking] == ["global", "queue:br", "tag:env=prod"]
    assert set(why.holders) == {"global", "queue:br", "tag:env=prod"}
    for scope, holders in why.holders.items():
        assert [(h.run_id, h.attempt, h.worker_id, h.slots) for h in holders] == [(holder.id, 1, "holder-worker", 1)], (
            scope
        )

    urgent_why = explain(store, urgent.id)
    assert (urgent_why.position, urgent_why.queued_in_queue) == (1, 4)
    assert [c.scope for c in urgent_why.checks] == ["global", "queue:br"]  # env=dev has no limit

    # raise what blocks except the tag: explain names only the tag, with its holder
    live.set_limit(store, "global", 10)
    live.set_limit(store, "queue:br", 10)
    why = explain(store, waiting[0].id)
    assert [(c.scope, c.used, c.limit, c.ok) for c in why.checks] == [
        ("global", 1, 10, True),
        ("queue:br", 1, 10, True),
        ("tag:env=prod", 1, 1, False),
    ]
    assert list(why.holders) == ["tag:env=prod"]
    assert why.holders["tag:env=prod"][0].run_id == holder.id
    # the claim agrees: `urgent` (dev) runs, the prod runs stay blocked by the tag alone
    assert [run.id for run in _pass(store)] == [urgent.id]
    assert waiting[0].info().block_reason == _reason(("tag:env=prod", 1, 1))

    running = explain(store, holder.id)
    assert running.position is None and running.checks == [] and running.holders == {}
    assert running.run.status is RunStatus.RUNNING
    with pytest.raises(RunNotFound):
        explain(store, "no-such-run")
