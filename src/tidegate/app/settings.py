"""Tunables read from the environment (`TIDEGATE_*`); defaults and ranges are `domain.tunables`.

They are read when a worker or app is built, not at import, so tests and
scripts can set them per process. A value that cannot work (a poll interval
of 0 spins an idle worker on a core; a lease shorter than its renewal round
trip is lost at once) is refused with the variable named and its range; the
same range applies when the value is passed as an argument instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from tidegate.domain.clock import SYSTEM_CLOCK, Clock
from tidegate.domain.durations import parse_duration
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.jsonvalue import DEFAULT_MAX_PAYLOAD, PAYLOAD_SETTING
from tidegate.domain.sizes import format_size, parse_size
from tidegate.domain.tunables import COUNTS, LOG_FORMATS, MAX_PAYLOAD, MIN_PAYLOAD, TUNABLES, sweep_interval_for
from tidegate.engine.runtime.pools import ClaimPolicy

LOG_FORMAT_SETTING = "TIDEGATE_LOG_FORMAT"


def duration_setting(name: str, given: str | float | None = None, *, label: str | None = None) -> float:
    """Seconds for tunable `name`: `given` (an argument called `label`) if any, else the environment."""
    tunable = TUNABLES[name]
    if given is not None:
        return parse_duration(given, name=label or name, minimum=tunable.minimum, maximum=tunable.maximum)
    raw = os.environ.get(name) or tunable.default
    return parse_duration(raw, name=name, minimum=tunable.minimum, maximum=tunable.maximum)


def count_setting(name: str) -> int:
    """A whole number for tunable `name` from the environment, within its range, else its default."""
    count = COUNTS[name]
    raw = (os.environ.get(name) or "").strip()
    if not raw:
        return count.default
    if not (raw.isascii() and raw.isdigit()) or not count.minimum <= int(raw) <= count.maximum:
        raise ConfigurationError(f"{name}: {raw!r} is not a whole number from {count.minimum} to {count.maximum}")
    return int(raw)


def sweep_interval(lease_duration: float) -> float:
    if os.environ.get("TIDEGATE_SWEEP_INTERVAL"):
        return duration_setting("TIDEGATE_SWEEP_INTERVAL")
    return sweep_interval_for(lease_duration)


def listen_check_interval() -> float:
    """How often a PostgreSQL wake-up connection proves it is alive (a frozen server answers nothing)."""
    return duration_setting("TIDEGATE_LISTEN_CHECK_INTERVAL")


def max_payload() -> int:
    """TIDEGATE_MAX_PAYLOAD: the largest args (per run) and result (per attempt or step) stored."""
    raw = os.environ.get(PAYLOAD_SETTING)
    if not raw:
        return DEFAULT_MAX_PAYLOAD
    size = parse_size(raw, name=PAYLOAD_SETTING)
    if not MIN_PAYLOAD <= size <= MAX_PAYLOAD:
        raise ConfigurationError(
            f"{PAYLOAD_SETTING}: {raw!r} is out of range: use {format_size(MIN_PAYLOAD)} to {format_size(MAX_PAYLOAD)}"
        )
    return size


def log_format(given: str | None = None, *, label: str = "--log-format") -> str:
    """`text` or `json`: `given` (the option called `label`) if any, else TIDEGATE_LOG_FORMAT, else text."""
    name, raw = (label, given) if given is not None else (LOG_FORMAT_SETTING, os.environ.get(LOG_FORMAT_SETTING))
    value = (raw or "text").strip().lower()
    if value not in LOG_FORMATS:
        raise ConfigurationError(f"{name}: {raw!r} is not a log format: use {' or '.join(LOG_FORMATS)}")
    return value


def check_environment() -> None:
    """Read every `TIDEGATE_*` tunable now, so a process refuses a bad one at start (one line naming it),
    not when the first run, stream or step happens to need it."""
    for name in TUNABLES:
        if name != "TIDEGATE_SWEEP_INTERVAL" or os.environ.get(name):
            duration_setting(name)
    for name in COUNTS:
        count_setting(name)
    max_payload()
    log_format()


def claim_policy() -> ClaimPolicy:
    """How the PoolGuard waits for pool slots, from TIDEGATE_CLAIM_* (read now, not at import)."""
    return ClaimPolicy(
        timeout=duration_setting("TIDEGATE_CLAIM_TIMEOUT"),
        poll_interval=duration_setting("TIDEGATE_CLAIM_POLL_INTERVAL"),
        poll_jitter=duration_setting("TIDEGATE_CLAIM_POLL_JITTER"),
    )


_default_clock: Clock = SYSTEM_CLOCK


def default_clock() -> Clock:
    """The clock of an App built without one: the system's, unless a test put its own in place, so
    that the apps its code under test builds follow the test's time (`tidegate.testing`)."""
    return _default_clock


@contextmanager
def using_clock(clock: Clock) -> Iterator[Clock]:
    """Make `clock` the default of every App built meanwhile; the previous default comes back after."""
    global _default_clock
    previous, _default_clock = _default_clock, clock
    try:
        yield clock
    finally:
        _default_clock = previous
