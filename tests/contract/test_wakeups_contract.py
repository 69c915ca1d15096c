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


def test_closing_a_subscription_ends_its_wait_at_once(database_url):
    """A worker's stop waited for the listener's next look-up (PostgreSQL looked every 0.25 s).

    With an hour between the wake-up connection's checks, nothing but the close
    itself can end the thread's wait: if close did not interrupt it, the thread
    would still be alive after close returns (close gives it 2 s to end).
    """
    store = open_store(database_url, listen_check=3600.0)
    try:
        before = _listener_threads()
        for _ in range(3):
            listener = store.listen(lambda: None)
            listener.close()
            assert _listener_threads() == before
    finally:
        store.close()


def _listener_threads() -> int:
    return sum(1 for thread in threading.enumerate() if thread.name.startswith("tidegate") and "listen" in thread.name)


def test_closing_a_store_twice_is_harmless(database_url):
    store = open_store(database_url)
    store.close()
    store.close()


def test_a_closed_store_refuses_further_calls(database_url):
    store = open_store(database_url)
    store.close()
    with pytest.raises(StoreUnavailable):
        store.get_run("any")
