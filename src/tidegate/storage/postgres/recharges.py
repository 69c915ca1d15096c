"""PostgreSQL: charging again the runs taken ahead under a rate whose lead ran out (`CycleRequest.recharge`).

A transaction of its own, before the cycle's: it takes the claim fence (the rules
stay in force until it commits), then the claim turn of each rated queue of the
runs (name order), then locks their rate windows (key order), as a claim does.
Only a queue's own rate lets a run wait ahead (`RateCharger.ahead_lead`), and a
queue's rate is charged only under its claim turn, so these locks wait on no one
that waits on them.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from tidegate.domain.model import CycleRequest
from tidegate.domain.rate_charger import Recharge, recharge
from tidegate.storage.postgres.limits import Limits
from tidegate.storage.postgres.payloads import fence_arrays
from tidegate.storage.shared import claiming


def recharged(
    connection: psycopg.Connection[Any], query: Any, limits: Limits, request: CycleRequest
) -> tuple[Recharge, float]:
    """Charge `request.recharge` again in the caller's transaction; what was decided, and the database's
    time it was decided at."""
    connection.execute(query("claim_fence"))
    cached = limits.cached
    rules_cursor = connection.execute(query("load_rules"), {"known": None if cached is None else cached[0]})
    params = {**fence_arrays(request.recharge), "worker": request.worker_id}
    runs = connection.cursor(row_factory=dict_row).execute(query("recharged_runs"), params)  # one round trip
    rules = limits.rules_from_row(rules_cursor.fetchone())
    if rules is None:  # the cache moved meanwhile: read the rules whole
        rules = limits.parse_rules(connection.execute(query("load_rules"), {"known": None}).fetchone())
    found = {row["id"]: row for row in runs.fetchall()}
    rows = [found[run_id] for run_id, _ in request.recharge if run_id in found]
    for queue in sorted({row["queue"] for row in rows if rules.has_rates(row["queue"])}):
        connection.execute(query("claim_turn"), {"queue": queue})
    keys = claiming.rate_keys(rows, rules)
    locked = connection.execute(
        query("rate_states"), {"scopes": [scope for scope, _ in keys], "windows": [window for _, window in keys]}
    ).fetchall()
    now = locked[0][0]
    states = {(scope, window): tat for _, scope, window, tat in locked if scope is not None}
    candidates = [claiming.to_candidate(row, rules, row["tags"] or {}, row["scheduled_at"].timestamp()) for row in rows]
    decided = recharge(candidates, states, rules, now, request.recharge_at_once)
    if decided.rate_states:
        written = sorted(decided.rate_states)
        connection.execute(
            query("rate_states_write"),
            {
                "scopes": [scope for scope, _ in written],
                "windows": [window for _, window in written],
                "tats": [decided.rate_states[key] for key in written],
            },
        )
    return decided, now
