"""Wake-ups and closing through the Store port.

`listen` must call back when another store (another process, in production)
writes something a claimer waits for; a wake-up may also come for nothing,
so only "at least one, after the write" is the contract. No wake-up latency
is asserted: the deadline only catches a wake-up that never comes. Closing a
subscription must not wait for its thread's next look-up, though: every
worker that stops closes one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from tidegate import StoreUnavailable
from tidegate.bootstrap import open_store
from tidegate.storage.port import Store

from .conftest import enqueue_one


@pytest.fixture
def other_store(database_url: str, store: Store) -> Iterator[Store]:
    """A second store on the same database, as another process would open it."""
    other = open_store(database_url)
    try:
        yield other
    finally:
        other.close()


def woken_by(store: Store, write, attempts: int = 5, each: float = 3.0) -> bool:
    """Whether writes made after the subscription wake it.

    Two writes must each be followed by a wake-up: a single one could be the
    wake-up an adapter may give for nothing when it starts listening. A few
    tries are allowed in case the subscription is not in place at once."""
    woken = threading.Event()
    listener = store.listen(woken.set)
    try:
        answered = 0
        for _ in range(attempts):
            woken.clear()
            write()
            answered += woken.wait(each)
            if answered == 2:
                return True
        return False
    finally:
        listener.close()


def test_a_run_enqueued_elsewhere_wakes_a_listener(store, other_store):
    assert woken_by(store, lambda: enqueue_one(other_store))


def test_a_limit_changed_elsewhere_wakes_a_listener(store, other_store):
    assert woken_by(store, lambda: other_store.set_limit("global", 4))


def test_closing_a_subscription_ends_its_wait_at_once(store):
    """PostgreSQL's listener looked up every 0.25 s to notice a close: each worker's stop took that long."""
    closing = []
    for _ in range(8):
        listener = store.listen(lambda: None)
        time.sleep(0.05)  # its thread is waiting now
        began = time.monotonic()
        listener.close()
        closing.append(time.monotonic() - began)
    assert sum(closing) < 0.8, closing  # a look-up every 0.25 s would take about 1.6 s


def test_closing_a_store_twice_is_harmless(database_url):
    store = open_store(database_url)
    store.close()
    store.close()


def test_a_closed_store_refuses_further_calls(database_url):
    store = open_store(database_url)
    store.close()
    with pytest.raises(StoreUnavailable):
        store.get_run("any")
