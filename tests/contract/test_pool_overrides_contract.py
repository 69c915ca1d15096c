"""Pool limits like every other limit (issue 15 items 2 and 8), through the Store port on both adapters.

The code declares a pool's default (`declare_pool`, what `App.set_pool_limit`
does on every import); a live change (`set_pool_limit`) is an override that
wins over any later declaration, is audited, and lasts until `reset_pool_limit`.
`pools()` says which value is in force and where it comes from, and lists every
pool a step asked for, configured or not.
"""

from __future__ import annotations

from tidegate.domain import events as history
from tidegate.domain.pools import pool_needs
from tidegate.domain.steps import SlotRequest

from .conftest import claim, enqueue_one


def status(store, name: str):
    return next(pool for pool in store.pools() if pool.name == name)


def test_a_live_override_survives_the_code_declaring_its_default_again(store):
    store.declare_pool("database", 2, 60)
    assert (status(store, "database").limit, status(store, "database").source) == (2, "code")
    store.set_pool_limit("database", 3, 60)
    again = store.declare_pool("database", 2, 60)  # the next import, or a worker restart
    assert (again.limit, again.source) == (3, "override")
    pool = status(store, "database")
    assert (pool.limit, pool.source, pool.declared_limit) == (3, "override", 2)


def test_a_declaration_changes_the_value_in_force_only_without_an_override(store):
    store.declare_pool("db", 2, 60)
    store.declare_pool("db", 4, 60)
    assert (status(store, "db").limit, status(store, "db").source) == (4, "code")
    store.set_pool_limit("db", 1, 60)
    store.declare_pool("db", 5, 60)
    assert (status(store, "db").limit, status(store, "db").declared_limit) == (1, 5)


def test_reset_puts_the_code_value_back_and_an_undeclared_pool_becomes_unconfigured(store):
    store.declare_pool("db", 2, 60)
    store.set_pool_limit("db", 7, 30)
    back = store.reset_pool_limit("db")
    assert back is not None and (back.limit, back.lease_seconds, back.source) == (2, 60, "code")
    store.set_pool_limit("adhoc", 4, 60)
    assert store.reset_pool_limit("adhoc") is None
    assert "adhoc" not in {pool.name for pool in store.pools()}


def test_live_changes_are_audited_and_repeated_declarations_are_not(store):
    store.declare_pool("db", 2, 60)
    store.declare_pool("db", 2, 60)
    store.set_pool_limit("db", 3, 60)
    store.declare_pool("db", 2, 60)
    store.reset_pool_limit("db")
    changes = [event.metadata for event in store.events_after(0, 100) if event.type == "LimitChanged"]
    assert changes == [
        history.pool_limit_changed("db", None, 2, 60, source="code").metadata,
        history.pool_limit_changed("db", 2, 3, 60, source="override").metadata,
        history.pool_limit_changed("db", 3, 2, 60, source="code", reset=True).metadata,
    ]


def test_a_pool_a_step_asked_for_is_listed_after_its_steps_are_done(store):
    enqueue_one(store)
    [run] = claim(store, "w1")
    grant = store.acquire_slots(run.fence, "w1", SlotRequest("step", pool_needs({"never_set": 1}), {}))
    assert grant.granted
    store.release_slots(run.fence, "step")
    pool = status(store, "never_set")
    assert (pool.limit, pool.claimed, pool.pending, pool.source) == (None, 0, 0, None)
