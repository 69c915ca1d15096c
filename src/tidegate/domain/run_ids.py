"""Run ids: ULIDs (26 characters of Crockford base32: 48 bits of milliseconds, 80 random bits).

Ids sort by submit time, and strictly increase within a process: a run submitted after another
gets the larger id even within one millisecond, so the claim order's last tie-break (`id`) keeps
submission order. A later millisecond starts from fresh random bits, so two processes' ids
interleave by time but never collide in practice.

Written here rather than taken from python-ulid (issue 29): a single submit on PostgreSQL spends a
few hundred microseconds in Python in all, and that library's `str(ULID())` (a `ULID` object, its
generator's lock and policy objects, a bitwise encoding) took two to three times as long as this
(timeit on the 2-core machine under load: 22.5 against 10.1 µs). tests/unit/test_run_ids.py holds
the encoding to the ULID spec.
"""

from __future__ import annotations

import os
import threading
import time

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Every pair of symbols by its 10 bits: 13 lookups encode the 130 bits of 26 symbols (the top two are 0).
_PAIRS = [first + second for first in _CROCKFORD for second in _CROCKFORD]
_SHIFTS = range(120, -1, -10)
_RANDOM_BITS = 80

_lock = threading.Lock()
_last = 0


def new_run_id() -> str:
    """A fresh ULID, larger than every one this process made before."""
    global _last
    value = (time.time_ns() // 1_000_000) << _RANDOM_BITS | int.from_bytes(os.urandom(10), "big")
    with _lock:
        if value <= _last:  # the same millisecond (or the clock stepped back): one past the last
            value = _last + 1
        _last = value
    return encode(value)


def encode(value: int) -> str:
    """A 128-bit value as its 26-symbol ULID text."""
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])
