"""Waiting for the database server at start.

A worker is often started beside its database: a deploy that brings both up,
a server restarting, or recovering from a crash. A worker that failed at once
would leave the retrying to its supervisor, if it has one; so a server that
does not answer is tried again for `TIDEGATE_STARTUP_WAIT`, said once in the
log, and only then is its error raised. A file that cannot be opened is not
waited for: it does not come back by itself (`ServerUnreachable` tells the two
apart).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from tidegate.domain.clock import SYSTEM_CLOCK, Clock
from tidegate.domain.errors import ServerUnreachable

log = logging.getLogger("tidegate.worker")

T = TypeVar("T")

FIRST_RETRY = 0.1  # seconds; doubles up to MAX_RETRY, so a server back is used within two seconds
MAX_RETRY = 2.0


def reach(
    attempt: Callable[[], T],
    wait: float,
    *,
    clock: Clock = SYSTEM_CLOCK,
    sleep: Callable[[float], None] = time.sleep,
    given_up: Callable[[], bool] = lambda: False,
) -> T:
    """`attempt()`, tried again while the server is unreachable, for up to `wait` seconds, or
    until `given_up()` (the worker was asked to stop meanwhile)."""
    deadline = clock.monotonic() + wait
    delay = FIRST_RETRY
    warned = False
    while True:
        try:
            return attempt()
        except ServerUnreachable as error:
            left = deadline - clock.monotonic()
            if left <= 0 or given_up():
                raise
            if not warned:
                log.warning("%s; trying again for up to %.0fs (TIDEGATE_STARTUP_WAIT)", error, left)
                warned = True
            sleep(min(delay, left))
            delay = min(delay * 2, MAX_RETRY)
