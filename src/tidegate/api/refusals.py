"""Admission refusals answered again without a store call: what keeps a 429 cheap under a flood.

A submit past a ceiling costs a write transaction (the count must be exact,
so it is taken under the ceiling's lock), and a flood is a stream of exactly
those. Once the store has refused a request's (task, queue), the same request
is answered 429 from here, on the event loop, with the store's own figures and
Retry-After, for `STALENESS` seconds. After that the next request asks the
store again, and while that one is in flight (at most `GRACE` longer) the
others are still refused from here instead of all queueing for the store.
The cache can only repeat a refusal, never admit: every 201 is still decided
by the store's count, so no ceiling is ever passed. What it can get wrong is
bounded: for at most `STALENESS + GRACE` after room appears (a run ends, a
limit is raised, a queue is resumed), a submit may still be refused.
Each refusal is kept with what its request was checked against (`Known`, the
caller's), so that a repeat is refused only once it has passed the same checks
on the loop: a request that can never succeed is never told to retry.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from tidegate.domain.errors import AdmissionRejected

STALENESS = 0.05  # seconds a refusal is repeated without asking the store; docs/architecture.md
GRACE = 0.05  # and at most this much longer while one request asks the store again
_PRUNE_AT = 1024  # remembered refusals before the expired ones are dropped

Key = tuple[str, str | None]  # the request's task and explicit queue: what decides the ceilings it meets
Known = TypeVar("Known")  # what the refused request was checked against


class Refusals(Generic[Known]):
    """The store's latest refusal per request key, with what it was checked against, repeated for a bounded time.

    Used from the event loop only (one thread), so it needs no lock.
    """

    def __init__(
        self, staleness: float = STALENESS, grace: float = GRACE, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._staleness = staleness
        self._grace = grace
        self._clock = clock  # a local deadline: monotonic, nothing crosses processes
        self._refused: dict[Key, tuple[float, AdmissionRejected, Known]] = {}
        self._asking: Counter[Key] = Counter()  # requests of each key in flight to the store

    def recent(self, key: Key) -> tuple[AdmissionRejected, Known] | None:
        """A fresh copy of the refusal of `key` and what it was checked against if it may still be
        repeated, else None (ask the store)."""
        found = self._refused.get(key)
        if found is None:
            return None
        given, refused, known = found
        age = self._clock() - given
        if age >= self._staleness + self._grace:
            del self._refused[key]
            return None
        if age >= self._staleness and not self._asking[key]:
            return None  # this request asks the store again; the others wait for no one meanwhile
        # A new exception each time: raising one instance again and again would grow its traceback.
        return AdmissionRejected(refused.scope, refused.active, refused.limit, refused.retry_after), known

    @contextmanager
    def asking(self, key: Key) -> Iterator[None]:
        """Around a request of `key` that goes to the store."""
        self._asking[key] += 1
        try:
            yield
        finally:
            self._asking[key] -= 1
            if not self._asking[key]:
                del self._asking[key]

    def remember(self, key: Key, refused: AdmissionRejected, known: Known) -> None:
        now = self._clock()
        if len(self._refused) >= _PRUNE_AT:
            limit = self._staleness + self._grace
            self._refused = {known: found for known, found in self._refused.items() if now - found[0] < limit}
        self._refused[key] = (now, refused, known)

    def forget(self, key: Key) -> None:
        """The store just admitted a request of `key`: there is room, repeat no refusal of it."""
        self._refused.pop(key, None)
