"""Until when a holder may use what it leased, judged on its own clock.

The store stamps a lease's expiry with its own clock (`now() + lease`) while
it runs the request, so the expiry is no earlier than the moment the request
was sent plus the lease. A holder that stops using a claim by then, measured
on its own monotonic clock from that send, never overlaps whoever the
sweeper gives the claim to next, whatever the store is doing meanwhile (a
renewal blocked in an outage, a store that answers late).
"""

from __future__ import annotations

from datetime import datetime

LEASE_MARGIN_SHARE = 0.2
"""The share of a lease kept in hand. Renewals come every third of the lease,
so one failed renewal is survived (the next one is sent at two thirds); the
rest leaves the stop time to take effect before the sweeper frees the claim."""


def usable_until(sent_at: float, lease_seconds: float) -> float:
    """The last moment (on the clock `sent_at` was read from) to use a claim whose lease was set
    by a request sent at `sent_at`."""
    return sent_at + lease_seconds * (1 - LEASE_MARGIN_SHARE)


HEARTBEATS_PER_LEASE = 3
"""A worker heartbeats (and renews its leases) every third of its lease: one failed beat is survived."""

MISSED_HEARTBEATS = 2
"""Heartbeat intervals without one after which a worker's heartbeat is *lost*: one interval late
(past the one a slow round trip could take), long before its lease runs out."""


def heartbeat_interval(lease_seconds: float) -> float:
    """How often a worker with this lease heartbeats."""
    return lease_seconds / HEARTBEATS_PER_LEASE


def heartbeat_lost(age: float, lease_seconds: float) -> bool:
    """Whether a worker whose last heartbeat is `age` seconds old (the store's clock) has missed
    MISSED_HEARTBEATS of them: it is killed, hung or cut off, and its runs only look running until
    their leases expire. Shown on those runs at once, rather than after the whole lease."""
    return age > MISSED_HEARTBEATS * heartbeat_interval(lease_seconds)


def stuck(running: bool, lease_expires_at: datetime | None, now: datetime) -> bool:
    """A running attempt whose lease expired: its worker stopped renewing (killed, hung, cut off), so
    the run holds its slots until a sweep re-queues it. Shown as such everywhere, never as plain running."""
    return running and lease_expires_at is not None and lease_expires_at < now
