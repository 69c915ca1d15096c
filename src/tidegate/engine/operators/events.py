"""The event history as operators and streams read it: after a cursor, the latest of a kind, and
the wake-ups that say new events may be there.

The API's event streams (`api/fanout.py`, `api/wakeups.py`), the dashboard's audit history and
overflow note read events here; events are append-only, so every reader resumes by id.
"""

from __future__ import annotations

from collections.abc import Callable

from tidegate.domain.model import EventRecord
from tidegate.storage.port import Listener, Store


def events_after(store: Store, after: int, limit: int) -> list[EventRecord]:
    """Every event with an id above `after`, oldest first, at most `limit`: a stream resumes here."""
    return store.events_after(after, limit)


def last_event_id(store: Store) -> int:
    """The newest event's id (0 when there is none): where a stream of new events starts."""
    return store.last_event_id()


def latest_events(store: Store, kind: str, limit: int) -> list[EventRecord]:
    """The newest `limit` events of type `kind`, newest first (LimitChanged: the audit history)."""
    return store.latest_events(kind, limit)


def listen(store: Store, wake: Callable[[], None]) -> Listener:
    """Call `wake` (on another thread) after every commit that may have added events; close the
    listener to stop. A hint only: a reader keeps a backstop poll."""
    return store.listen(wake)
