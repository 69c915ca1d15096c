"""The claim of a worker whose queues no limit applies to: one statement, no round trip of its own.

Where no limit, local cap or fair ordering applies to any queue a worker
claims from, `admit` takes the first runs across the queues' windows in claim
order and nothing else, so reading the windows and writing the claim can be
one statement (`claim_runs_free`) that travels with the cycle's reports and
its COMMIT: a whole cycle in one round trip, where the general claim needs
two (its window read, then its write).

It is chosen on the rules this store has cached (`ClaimPlan.free`); the statement itself checks,
under the claim fence, that they are still in force (the rules version), so a
limit set live is never claimed past: the statement then claims nothing and
the cycle claims again the general way, under the new rules. The same happens
when a suspect is among the runs it would take, the one case `admit` decides
here that SQL does not (a worker runs one group of suspects at a time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from tidegate.domain.model import ClaimedRun
from tidegate.storage.postgres.payloads import claimed_run


@dataclass(frozen=True)
class FreeClaim:
    claimed: list[ClaimedRun]
    refused: bool  # the rules moved, or a suspect was among the runs: claim again the general way
    next_due_in: float | None


def send(
    connection: psycopg.Connection[Any],
    query: str,
    known_version: str,
    queues: list[str],
    worker_id: str,
    limit: int,
    lease_seconds: float,
) -> psycopg.Cursor[Any]:
    """Queue the claim (its rows arrive with the commit)."""
    params = {"known": known_version, "queues": queues, "limit": limit, "worker": worker_id, "lease": lease_seconds}
    return connection.execute(query, params)


def received(cursor: psycopg.Cursor[Any]) -> FreeClaim:
    """The claimed runs, in claim order, and the trailer row's verdict and next-due."""
    rows = cursor.fetchall()
    trailer = rows[-1]  # always last: ORDER BY n NULLS LAST
    claimed = [claimed_run(tuple(row[1:14])) for row in rows[:-1]]
    return FreeClaim(claimed, bool(trailer[14]), trailer[15])
