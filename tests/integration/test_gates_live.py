"""Live limits on both adapters: overrides persist, are versioned and evented, reset, and preview.

(The same change made in the middle of a loaded run, across worker
processes, is in process/test_gates_processes.py.)
"""

from __future__ import annotations

import json

import pytest

from tidegate import App, Concurrency, ConfigurationError, Partition, RunQueueConfig, RunStatus
from tidegate.domain.model import CycleRequest
from tidegate.engine.operators import limits as live

from .conftest import execute_sql


def limit_events(database_url):
    rows = execute_sql(
        database_url, "SELECT run_id, metadata FROM tidegate_events WHERE type = 'LimitChanged' ORDER BY id"
    )
    return [(run_id, json.loads(m) if isinstance(m, str) else m) for run_id, m in rows]


def rules_version(database_url):
    return int(execute_sql(database_url, "SELECT value FROM tidegate_settings WHERE name = 'rules_version'")[0][0])


def _app(database_url):
    application = App(database_url, run_queue=RunQueueConfig(max_concurrent_runs=8))
    application.queue("lq", concurrency=Concurrency(global_limit=4, partition=Partition(by_args=["tenant"])))

    @application.task(name="lq.work", queue="lq")
    def work(tenant: str = "", n: int = 0) -> int:
        return n

    return application


def _declare(application):
    """Store the app's declarations, as a worker or a submit does first."""
    application.store.register_limits(application.run_queue, [application.queue_config("lq")], [])


@pytest.fixture
def lapp(database_url):
    application = _app(database_url)
    try:
        _declare(application)
        yield application
    finally:
        application.close()


def test_an_override_persists_bumps_versions_writes_events_and_resets(lapp, database_url):
    store = lapp.store
    assert store.limit_overrides() == []
    version = rules_version(database_url)

    change = live.set_limit(store, "queue:lq", 1)
    assert (change.target, change.old, change.new, change.version) == ("queue:lq", 4, 1, 1)
    [override] = store.limit_overrides()
    assert (override.target, override.limit, override.version) == ("queue:lq", 1, 1)
    assert store.rules().queue_limit("lq", "tenant=a") == 1
    assert rules_version(database_url) == version + 1

    change = live.set_limit(store, "queue:lq", 2)
    assert (change.old, change.new, change.version) == (1, 2, 2)
    assert [(o.target, o.limit, o.version) for o in store.limit_overrides()] == [("queue:lq", 2, 2)]
    assert rules_version(database_url) == version + 2

    # another process (and a restarted app re-registering its declarations) sees the override
    with _app(database_url) as other:
        _declare(other)
        assert other.store.rules().queue_limit("lq", "tenant=b") == 2
        assert [(o.target, o.limit) for o in other.store.limit_overrides()] == [("queue:lq", 2)]

    change = live.reset_limit(store, "queue:lq")
    assert (change.old, change.new) == (2, 4)  # the code's limit again
    assert store.limit_overrides() == []
    assert store.rules().queue_limit("lq", "tenant=a") == 4
    assert rules_version(database_url) > version + 2

    events = limit_events(database_url)
    assert [run_id for run_id, _ in events] == [None, None, None]
    assert [(m["target"], m["old"], m["new"], m["reset"]) for _, m in events] == [
        ("queue:lq", 4, 1, False),
        ("queue:lq", 1, 2, False),
        ("queue:lq", 2, 4, True),
    ]
    assert [m["version"] for _, m in events][:2] == [1, 2]


def test_overrides_of_every_kind_of_target(lapp):
    store = lapp.store
    assert live.set_limit(store, "global", 3).new == 3
    assert store.rules().global_limit() == 3
    assert live.set_limit(store, "global", -1).new is None  # unlimited
    assert store.rules().global_limit() is None
    assert live.set_limit(store, "queue:lq/tenant=big", 7).new == 7
    rules = store.rules()
    assert (rules.queue_limit("lq", "tenant=big"), rules.queue_limit("lq", "tenant=small")) == (7, 4)
    assert live.set_limit(store, "tag:env=prod", 2).old is None  # a live limit on a tag the code never limited
    assert store.rules().scopes_for("lq", "tenant=a", {"env": "prod"})[-1].key == "tag:env=prod"
    assert {o.target for o in store.limit_overrides()} == {"global", "queue:lq/tenant=big", "tag:env=prod"}


def test_preview_counts_what_a_change_would_unblock_or_block_and_changes_nothing(lapp, database_url):
    store = lapp.store
    work = lapp.tasks["lq.work"]
    running_a = work.submit_many([{"tenant": "a"}] * 4)
    claimed = store.cycle(CycleRequest("w-1", ["lq"], [], [], 4, 60)).claimed
    assert {run.id for run in claimed} == {h.id for h in running_a}  # a is at its limit of 4
    queued_a = work.submit_many([{"tenant": "a"}] * 3)
    queued_b = work.submit_many([{"tenant": "b"}] * 5)
    assert store.scope_usage() == {"global": 4, "queue:lq/tenant=a": 4}

    def snapshot():
        return (
            [(o.target, o.limit, o.version) for o in store.limit_overrides()],
            rules_version(database_url),
            store.status_counts(),
            len(limit_events(database_url)),
            [r.id for r in store.list_queued()],
            store.scope_usage(),
        )

    before = snapshot()
    # limit 2 per partition: b could start 4 now, 2 after; a stays blocked
    lower = live.preview(store, "queue:lq", 2)
    assert (lower.old, lower.new, lower.unblocked, lower.blocked, lower.considered) == (4, 2, 0, 2, 8)
    # limit 6: a (older) could start 2 more, which takes 2 of the global cap's 4 free slots from b
    raised = live.preview(store, "queue:lq", 6)
    assert (raised.old, raised.new, raised.unblocked, raised.blocked) == (4, 6, 2, 2)
    assert snapshot() == before  # a preview changes nothing

    live.set_limit(store, "global", None)  # now the queue limit alone decides
    before = snapshot()
    wide = live.preview(store, "queue:lq", 6)
    assert (wide.unblocked, wide.blocked) == (3, 0)  # a: 2 more; b: all 5 instead of 4
    only_b = live.preview(store, "queue:lq/tenant=b", 1)
    assert (only_b.old, only_b.new, only_b.unblocked, only_b.blocked) == (4, 1, 0, 3)
    assert snapshot() == before
    assert {h.status() for h in queued_a + queued_b} == {RunStatus.QUEUED}


def test_preview_of_a_reset_counts_against_the_codes_limit(lapp):
    store = lapp.store
    work = lapp.tasks["lq.work"]
    live.set_limit(store, "queue:lq", 1)
    work.submit_many([{"tenant": "a"}] * 5)
    preview = live.preview(store, "queue:lq", None, reset=True)
    assert (preview.old, preview.new, preview.unblocked, preview.blocked) == (1, 4, 3, 0)
    assert [(o.target, o.limit) for o in store.limit_overrides()] == [("queue:lq", 1)]


def test_preview_counts_runs_any_worker_could_start_not_one_workers_share(database_url):
    """`max_workers` and `local_limit` cap one worker; a preview speaks for the whole fleet.

    Raising the queue's global limit from 1 to 3 lets 2 more runs start (on
    other workers), even though one worker takes only one at a time.
    """
    with App(database_url) as application:
        application.queue("pw", concurrency=Concurrency(global_limit=1, local_limit=1), max_workers=1)

        @application.task(name="pw.work", queue="pw")
        def work(n: int = 0) -> int:
            return n

        work.submit_many([{"n": i} for i in range(5)])
        preview = live.preview(application.store, "queue:pw", 3)
        assert (preview.old, preview.new) == (1, 3)
        assert preview.unblocked == 2


@pytest.mark.parametrize(
    ("target", "limit"),
    [
        ("queue:nope", 2),
        ("queue:lq/customer_id=1", 2),
        ("queue:lq/tenant", 2),
        ("bogus", 2),
        ("queue:lq", 0),
        ("queue:lq", -3),
        ("queue:lq", "many"),
    ],
)
def test_preview_validates_like_a_change(lapp, target, limit):
    with pytest.raises(ConfigurationError):
        live.preview(lapp.store, target, limit)
