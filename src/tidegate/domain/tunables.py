"""The one table of tunable defaults and ranges (`TIDEGATE_*`), read by every layer that needs one.

A worker's settings, a step's claim policy and the environment reader in
`tidegate.app.settings` all take their defaults from here, so a default is
written once and a worker built directly agrees with one built by an App.
The ranges are rules: a poll of 0 spins an idle worker on a core, and a lease
renewed every third of itself needs at least 300ms to do any work.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidegate.domain.durations import MAX_DURATION, describe_range, parse_duration
from tidegate.domain.jsonvalue import DEFAULT_MAX_PAYLOAD, PAYLOAD_SETTING
from tidegate.domain.sizes import format_size

MIN_INTERVAL = 0.01  # a loop that wakes more often than every 10ms burns a core for nothing
MIN_LEASE = 0.3  # renewed every third of it: shorter would be all renewal and no work
MIN_RETENTION = 60.0  # a finished run is kept at least a minute: its waiter and `runs show` still find it
DEFAULT_MAX_WORKERS = 10  # a worker's capacity: runs executed at once
DEFAULT_POOL_LEASE = "5m"  # a pool's lease when its limit is set without one


@dataclass(frozen=True)
class Tunable:
    """A duration setting: its default (human string), range in seconds, and what it does."""

    default: str  # "" when derived from another setting
    minimum: float = 0.0
    maximum: float = MAX_DURATION
    meaning: str = ""


TUNABLES = {
    "TIDEGATE_LEASE_DURATION": Tunable(
        "30s",
        MIN_LEASE,
        meaning="a running run's lease, renewed every third of it; a lost worker's runs come back"
        " after it (plus a sweep)",
    ),
    "TIDEGATE_POLL_INTERVAL": Tunable(
        "1s", MIN_INTERVAL, meaning="an idle worker's poll, the backstop of wake-ups (a lost wake-up costs at most it)"
    ),
    "TIDEGATE_SWEEP_INTERVAL": Tunable(
        "",
        MIN_INTERVAL,
        meaning="how often a worker frees expired leases and re-queues lost runs (default: a third of the lease)",
    ),
    "TIDEGATE_CANCEL_GRACE": Tunable(
        "5s", meaning="how long a running run asked to cancel may take to stop on its own before it is stopped"
    ),
    "TIDEGATE_SHUTDOWN_GRACE": Tunable(
        "30s", meaning="on SIGTERM, how long in-flight runs may finish before the rest are handed back"
    ),
    "TIDEGATE_CLAIM_TIMEOUT": Tunable(
        "10m", meaning="how long a workflow step waits for its pool slots before it fails (PoolClaimTimeout)"
    ),
    "TIDEGATE_CLAIM_POLL_INTERVAL": Tunable(
        "1s", MIN_INTERVAL, meaning="a step waiting for pool slots polls this often when no wake-up comes"
    ),
    "TIDEGATE_CLAIM_POLL_JITTER": Tunable(
        "500ms", meaning="random extra on each such poll, so waiting steps do not march in step"
    ),
    "TIDEGATE_OVERFLOW_INTERVAL": Tunable(
        "30s", MIN_INTERVAL, meaning="the overflow signal (runs wait, every worker full) is raised at most this often"
    ),
    "TIDEGATE_LISTEN_CHECK_INTERVAL": Tunable(
        "5s",
        MIN_INTERVAL,
        meaning="PostgreSQL: a round trip on each wake-up connection this often; a silent one is replaced",
    ),
    "TIDEGATE_STARTUP_WAIT": Tunable(
        "60s",
        meaning="a worker starting while its PostgreSQL server does not answer keeps trying this long, then fails",
    ),
    "TIDEGATE_RETENTION": Tunable(
        "7d", MIN_RETENTION, meaning="finished runs older than this are deleted by the sweeper (and `db prune`)"
    ),
    # uvicorn has no deadline of its own: a client trickling header lines stayed connected for good
    "TIDEGATE_HEADER_TIMEOUT": Tunable(
        "10s",
        1.0,
        600.0,
        meaning="`serve`: a request's headers must arrive within this of the connection"
        " opening (or of a later request's first byte)",
    ),
    # the same attack on the body: a client trickling a declared body held a request open for good
    "TIDEGATE_BODY_TIMEOUT": Tunable(
        "30s",
        1.0,
        600.0,
        meaning="the HTTP API: a request's body must arrive within this of the app's first read of it (else 408)",
    ),
}


@dataclass(frozen=True)
class Count:
    """A whole-number setting: its default, range and what it does."""

    default: int
    minimum: int = 1
    maximum: int = 100_000
    meaning: str = ""


# Caps of `serve`'s event streams. Every stream is fed by one shared reader (one store read a wake-up
# however many stream), so a stream costs a queue of shared frames and a socket write a wake-up: 200
# such writes take a few milliseconds of the event loop, small next to an ordinary request. A token
# may hold half of them, so neither of the two tokens (nor a script reconnecting in a loop with one)
# can lock the other out; a browser holds at most six connections to a host, so 100 is a team's
# dashboards. A refused dashboard page refreshes every 5 s instead.
COUNTS = {
    "TIDEGATE_STREAMS_MAX": Count(200, meaning="`serve`: open event streams per server"),
    "TIDEGATE_STREAMS_PER_TOKEN": Count(
        100, meaning="`serve`: open event streams per token (without tokens, all clients are one party)"
    ),
}

MIN_PAYLOAD = 1024
MAX_PAYLOAD = 128 * 1024 * 1024  # a PostgreSQL jsonb value holds at most 256 MiB
LOG_FORMATS = ("text", "json")


@dataclass(frozen=True)
class Other:
    """A setting that is neither a duration nor a count: its default and range as the docs say them."""

    default: str
    range: str
    meaning: str


OTHERS = {
    "TIDEGATE_DATABASE": Other(
        "sqlite:///.tidegate/tidegate.db",
        "`sqlite:///PATH` or `postgresql://...`",
        "the store of an `App()` built without a URL, and of every command's `--database`;"
        " `?tidegate_pooler=transaction` on a PostgreSQL URL declares a transaction-mode pooler"
        " (docs/postgres-pooler.md)",
    ),
    "TIDEGATE_DATABASE_DIRECT": Other(
        "unset",
        "`postgresql://...`",
        "PostgreSQL behind a transaction-mode pooler: a URL of the same database that bypasses the pooler,"
        " where wake-ups LISTEN (unset: workers find work by polling, and say so once)",
    ),
    PAYLOAD_SETTING: Other(
        format_size(DEFAULT_MAX_PAYLOAD),
        f"{format_size(MIN_PAYLOAD)} to {format_size(MAX_PAYLOAD)}",
        "the largest args of a run, and result of an attempt or step, that is stored",
    ),
    "TIDEGATE_LOG_FORMAT": Other(
        "text",
        " or ".join(f"`{name}`" for name in LOG_FORMATS),
        "`worker` and `serve`: `json` writes each log line as one JSON object (as `--log-format json`)",
    ),
    "TIDEGATE_API_TOKEN": Other(
        "unset",
        "printable ASCII, no spaces; 24 characters or more when `serve` binds beyond loopback",
        "`serve`: the bearer token that may do anything",
    ),
    "TIDEGATE_API_READ_TOKEN": Other(
        "unset", "as TIDEGATE_API_TOKEN", "`serve`: the bearer token that may only read (changes get 403)"
    ),
    "TIDEGATE_K8S_JOB": Other("set by tidegate", "not for users", "in a step's pod: the Kubernetes Job it runs in"),
    "TIDEGATE_K8S_POD": Other("set by tidegate", "not for users", "in a step's pod: the step it runs"),
}


@dataclass(frozen=True)
class Setting:
    """One row of the settings table: every `TIDEGATE_*` variable, as the docs show it."""

    name: str
    default: str
    range: str
    meaning: str


def settings_table() -> list[Setting]:
    """Every `TIDEGATE_*` variable with its default, range and meaning, by name: the one source of the
    docs' table (docs/settings.md, generated from it and checked by a test)."""
    rows = [Setting(name, t.default or "derived", _duration_range(t), t.meaning) for name, t in TUNABLES.items()]
    rows += [Setting(name, str(c.default), f"{c.minimum} to {c.maximum}", c.meaning) for name, c in COUNTS.items()]
    rows += [Setting(name, o.default, o.range, o.meaning) for name, o in OTHERS.items()]
    return sorted(rows, key=lambda row: row.name)


def _duration_range(tunable: Tunable) -> str:
    return describe_range(tunable.minimum, tunable.maximum).removeprefix("use ")


def default_seconds(name: str) -> float:
    """The default of tunable `name` in seconds (a tunable derived from another has none)."""
    return parse_duration(TUNABLES[name].default, name=name)


def sweep_interval_for(lease_duration: float) -> float:
    """A worker sweeps every third of its lease unless told otherwise: expired leases are found
    within lease + a third, and the sweep costs little next to the renewals, also every third."""
    return lease_duration / 3
