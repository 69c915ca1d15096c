"""`tidegate doctor` and `GET /api/v1/doctor`: read a deployment's facts through the store, judge them.

The one service both faces call; the rules are `domain/doctor.py`. A store that
cannot be reached, or whose schema this code cannot read, ends the examination
there (every later check would only repeat that failure).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from tidegate.domain import doctor
from tidegate.domain.clock import Clock
from tidegate.domain.doctor import Diagnosis, Facts, Finding
from tidegate.domain.errors import SchemaError, StoreUnavailable
from tidegate.domain.model import RunStatus
from tidegate.storage.port import Store

RUNNING_READ = 10_000  # running runs read to find the stuck ones


def diagnose(get_store: Callable[[], Store], clock: Clock, retention: float) -> Diagnosis:
    """Every check on the store `get_store` gives (an App's, or one opened for the occasion: an open
    that fails is the first finding, not an error); `clock` is this host's, `retention`
    TIDEGATE_RETENTION in seconds."""
    try:
        return Diagnosis(tuple(_examine(get_store(), clock, retention)))
    except StoreUnavailable as error:
        return Diagnosis((doctor.unreachable(str(error)),))


def _examine(store: Store, clock: Clock, retention: float) -> list[Finding]:
    version = store.schema_version()
    try:
        store.check_schema()
    except SchemaError as error:
        return [Finding("store", doctor.Level.PASS, "the store answers"), doctor.schema(version, str(error))]
    facts = Facts(
        host_now=datetime.fromtimestamp(clock.wall(), UTC),
        schema_version=version,
        database=store.doctor_facts(retention),
        workers=store.list_workers(),
        queues=store.queue_counts(),
        pools=store.pools(),
        running=store.page_runs(status=RunStatus.RUNNING, limit=RUNNING_READ),
        schedules=store.list_schedules(),
        retention=retention,
        paused=store.rules().paused,
    )
    return doctor.examine(facts)
