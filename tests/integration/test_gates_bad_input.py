"""Bad limit input on both adapters: a clear error, and nothing stored or changed.

(Pure validation of every declaration is in unit/test_gates_policy.py; this file
checks that the error reaches the user through the app and the live-limit
API before anything touches the database.)
"""

from __future__ import annotations

import json

import pytest

from tidegate import (
    App,
    Concurrency,
    ConfigurationError,
    InvalidArgument,
    Partition,
    RunQueueConfig,
    TagConcurrencyLimit,
)
from tidegate.engine.operators import limits as live

from .conftest import execute_sql


def _state(app, database_url):
    """Everything a bad input must leave alone."""
    rules = app.store.rules()
    return (
        execute_sql(database_url, "SELECT count(*) FROM tidegate_runs")[0][0],
        execute_sql(database_url, "SELECT count(*) FROM tidegate_events")[0][0],
        execute_sql(database_url, "SELECT value FROM tidegate_settings WHERE name = 'rules_version'")[0][0],
        [(o.target, o.limit, o.version) for o in app.store.limit_overrides()],
        sorted(rules.queues),
        rules.run_queue,
        app.store.scope_usage(),
    )


@pytest.fixture
def bapp(database_url):
    application = App(database_url, run_queue=RunQueueConfig(max_concurrent_runs=4))
    application.queue("api", concurrency=Concurrency(global_limit=2, partition=Partition(by_args=["customer_id"])))
    application.queue("flat", concurrency=Concurrency(global_limit=3))

    @application.task(name="b.work", queue="api")
    def work(customer_id: int = 0) -> int:
        return customer_id

    work.submit(customer_id=1)  # registers the declarations; one run is stored
    try:
        yield application
    finally:
        application.close()


@pytest.mark.parametrize(
    "build",
    [
        lambda: RunQueueConfig(max_concurrent_runs=0),
        lambda: RunQueueConfig(max_concurrent_runs=-5),
        lambda: RunQueueConfig(tag_concurrency_limits=[TagConcurrencyLimit(key="env", limit=2)]),
        lambda: RunQueueConfig(tag_concurrency_limits=[TagConcurrencyLimit(key="env", value="prod", limit=0)]),
        lambda: RunQueueConfig(tag_concurrency_limits=[TagConcurrencyLimit(key="env", value="prod", limit=-1)]),
    ],
    ids=["cap-zero", "cap-negative", "tag-neither", "tag-zero", "tag-negative"],
)
def test_a_bad_run_queue_declaration_fails_before_the_app_exists(database_url, build):
    with pytest.raises(ConfigurationError):
        App(database_url, run_queue=build())


def test_a_run_queue_that_is_not_a_config_is_refused(database_url):
    with pytest.raises(ConfigurationError, match="RunQueueConfig"):
        App(database_url, run_queue={"max_concurrent_runs": 3})


@pytest.mark.parametrize(
    "concurrency",
    [
        lambda: Concurrency(global_limit=0),
        lambda: Concurrency(global_limit=-1),
        lambda: Concurrency(local_limit=0),
        lambda: Concurrency(global_limit=2, partition=Partition(by_args=["customer_id"]), overrides={"tenant=1": 4}),
        lambda: Concurrency(global_limit=2, overrides={"customer_id=1": 4}),
    ],
    ids=["global-zero", "global-negative", "local-zero", "override-wrong-key", "override-unpartitioned"],
)
def test_a_bad_queue_declaration_changes_nothing(bapp, database_url, concurrency):
    before = _state(bapp, database_url)
    with pytest.raises(ConfigurationError):
        bapp.queue("api", concurrency=concurrency())
    with pytest.raises(ConfigurationError):
        bapp.queue("newq", concurrency=concurrency())
    bapp.tasks["b.work"].submit(customer_id=2)  # registering again keeps the good declarations
    after = _state(bapp, database_url)
    assert after[2:] == before[2:]
    assert bapp.store.rules().queue_limit("api", "customer_id=2") == 2


def test_an_unknown_queue_at_submit_is_refused_and_stores_nothing(bapp, database_url):
    before = _state(bapp, database_url)
    with pytest.raises(InvalidArgument, match="unknown queue 'nowhere'"):
        bapp.tasks["b.work"].options(queue="nowhere").submit(customer_id=1)
    with pytest.raises(InvalidArgument, match="nowhere"):
        bapp.submit("b.work", args={"customer_id": 1}, queue="nowhere")
    with pytest.raises(InvalidArgument):
        bapp.tasks["b.work"].options(queue="bad queue name").submit()
    with pytest.raises(InvalidArgument, match="concurrency_key"):
        bapp.tasks["b.work"].options(concurrency_key="").submit()
    assert _state(bapp, database_url) == before


@pytest.mark.parametrize(
    ("target", "limit", "match"),
    [
        ("queue:api/tenant=1", 3, "not a partition key"),  # wrong partition key
        ("queue:api/customer_id", 3, "name=value"),  # wrong form
        ("queue:flat/customer_id=1", 3, "no partition"),  # flat is not partitioned
        ("queue:nope", 3, "no queue named 'nope'"),
        ("queue:nope/customer_id=1", 3, "no queue named 'nope'"),
        ("pools:db", 3, "not valid"),
        ("queue:api", 0, "at least 1"),
        ("queue:api", -4, "at least 1"),
        ("global", 2.5, "whole number"),
        ("tag:env=prod", "3", "whole number"),
    ],
)
def test_a_bad_live_override_is_refused_and_changes_nothing(bapp, database_url, target, limit, match):
    live.set_limit(bapp.store, "queue:flat", 1)  # an existing override must survive too
    before = _state(bapp, database_url)
    with pytest.raises(ConfigurationError, match=match):
        live.set_limit(bapp.store, target, limit)
    assert _state(bapp, database_url) == before


@pytest.mark.parametrize("target", ["queue:nope", "queue:api/tenant=1", "nonsense"])
def test_a_bad_reset_is_refused_and_changes_nothing(bapp, database_url, target):
    before = _state(bapp, database_url)
    with pytest.raises(ConfigurationError):
        live.reset_limit(bapp.store, target)
    assert _state(bapp, database_url) == before


def test_a_queue_name_with_a_slash_is_refused(database_url):
    """'/' separates a queue from its partition in scope keys (`queue:team/emails` is partition
    `emails` of queue `team`), so a queue may not be named with one: refused where it is declared."""
    with App(database_url) as application:
        with pytest.raises(InvalidArgument, match="queue name 'team/emails' is not valid"):
            application.queue("team/emails", concurrency=Concurrency(global_limit=2))
        with pytest.raises(InvalidArgument, match="queue name 'team/emails' is not valid"):

            @application.task(name="b.mail", queue="team/emails")
            def mail() -> None:
                return None

        assert application.store.rules().queues == {}


def test_bad_input_leaves_no_limit_event(bapp, database_url):
    for target, limit in [("queue:nope", 1), ("queue:api", 0)]:
        with pytest.raises(ConfigurationError):
            live.set_limit(bapp.store, target, limit)
    rows = execute_sql(database_url, "SELECT metadata FROM tidegate_events WHERE type = 'LimitChanged'")
    assert [json.loads(m) if isinstance(m, str) else m for (m,) in rows] == []
