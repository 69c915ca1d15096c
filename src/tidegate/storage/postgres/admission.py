"""PostgreSQL: the admission check of the paths that add active runs one by one.

`enqueue` decides its ceilings in set-based SQL for speed; a child's trigger and
an operator's retry add runs the same way a submit does, so they share this one
check: under the rules fence and each ceiling's lock in key order, READ
COMMITTED, the count sees every submit, trigger and retry that committed first,
and `domain.transitions` decides. Past a ceiling it raises the submit's
`AdmissionRejected`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from tidegate.domain.scopes import Rules
from tidegate.domain.transitions import ceilings_met
from tidegate.storage.postgres.activity import read_pace
from tidegate.storage.postgres.database import named_cursor


def refuse_past_ceilings(
    connection: psycopg.Connection[Any], query: Callable[[str], Any], rules: Rules, queues: Sequence[str]
) -> None:
    """Refuse `queues` (one entry per new active run) if they would pass a `max_active` ceiling."""
    ceilings = ceilings_met(rules, list(queues))
    if not ceilings:
        return
    connection.execute(query("enqueue_fence"))  # shared and re-entrant: a caller may hold it already
    connection.execute(query("enqueue_lock"), {"queues": sorted(set(queues))})
    counts = [
        named_cursor(connection, "enqueue_active", tuple_row).execute(query("enqueue_active"), {"queue": ceiling.queue})
        for ceiling in ceilings
    ]
    for ceiling, cursor in zip(ceilings, counts, strict=True):
        (active,) = cursor.fetchone() or (0,)
        if ceiling.refuses(active):
            raise ceiling.rejection(active, read_pace(connection, query, queue=ceiling.queue))
