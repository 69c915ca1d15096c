"""The one table of tunable defaults and ranges (`TIDEGATE_*`), read by every layer that needs one.

A worker's settings, a step's claim policy and the environment reader in
`tidegate.app.settings` all take their defaults from here, so a default is
written once and a worker built directly agrees with one built by an App.
The ranges are rules: a poll of 0 spins an idle worker on a core, and a lease
renewed every third of itself needs at least 300ms to do any work.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidegate.domain.durations import MAX_DURATION, parse_duration

MIN_INTERVAL = 0.01  # a loop that wakes more often than every 10ms burns a core for nothing
MIN_LEASE = 0.3  # renewed every third of it: shorter would be all renewal and no work
MIN_RETENTION = 60.0  # a finished run is kept at least a minute: its waiter and `runs show` still find it
DEFAULT_MAX_WORKERS = 10  # a worker's capacity: runs executed at once
DEFAULT_POOL_LEASE = "5m"  # a pool's lease when its limit is set without one


@dataclass(frozen=True)
class Tunable:
    default: str  # "" when derived from another setting
    minimum: float = 0.0
    maximum: float = MAX_DURATION


TUNABLES = {
    "TIDEGATE_LEASE_DURATION": Tunable("30s", MIN_LEASE),
    "TIDEGATE_POLL_INTERVAL": Tunable("1s", MIN_INTERVAL),
    "TIDEGATE_SWEEP_INTERVAL": Tunable("", MIN_INTERVAL),  # default: `sweep_interval_for(lease)`
    "TIDEGATE_CANCEL_GRACE": Tunable("5s"),
    "TIDEGATE_SHUTDOWN_GRACE": Tunable("30s"),
    "TIDEGATE_CLAIM_TIMEOUT": Tunable("10m"),  # how long a step waits for its pool slots
    "TIDEGATE_CLAIM_POLL_INTERVAL": Tunable("1s", MIN_INTERVAL),  # the fallback poll when no wake-up comes
    "TIDEGATE_CLAIM_POLL_JITTER": Tunable("500ms"),  # random extra on each poll, so waiters do not march in step
    "TIDEGATE_OVERFLOW_INTERVAL": Tunable("30s", MIN_INTERVAL),
    "TIDEGATE_LISTEN_CHECK_INTERVAL": Tunable("5s", MIN_INTERVAL),  # PostgreSQL: round trip on each wake-up connection
    "TIDEGATE_RETENTION": Tunable("7d", MIN_RETENTION),  # finished runs older than this are deleted by the sweeper
    # `serve`: a request's headers must arrive within this of the connection opening (or of the first byte
    # of a later request on it): uvicorn has none, and a client trickling header lines stayed on for good
    "TIDEGATE_HEADER_TIMEOUT": Tunable("10s", 1.0, 600.0),
}


@dataclass(frozen=True)
class Count:
    default: int
    minimum: int = 1
    maximum: int = 100_000


# Caps of `serve`'s event streams. Every stream is fed by one shared reader (one store read a wake-up
# however many stream), so a stream costs a queue of shared frames and a socket write a wake-up: 200
# such writes take a few milliseconds of the event loop, small next to an ordinary request. A token
# may hold half of them, so neither of the two tokens (nor a script reconnecting in a loop with one)
# can lock the other out; a browser holds at most six connections to a host, so 100 is a team's
# dashboards. A refused dashboard page refreshes every 5 s instead.
COUNTS = {
    "TIDEGATE_STREAMS_MAX": Count(200),
    "TIDEGATE_STREAMS_PER_TOKEN": Count(100),
}


def default_seconds(name: str) -> float:
    """The default of tunable `name` in seconds (a tunable derived from another has none)."""
    return parse_duration(TUNABLES[name].default, name=name)


def sweep_interval_for(lease_duration: float) -> float:
    """A worker sweeps every third of its lease unless told otherwise: expired leases are found
    within lease + a third, and the sweep costs little next to the renewals, also every third."""
    return lease_duration / 3
