"""The worker registry's logic, shared by both adapters: ranks, the fill order, the overflow check.

The adapters read the registry rows (`live_worker_ranks`, `worker_fill_state`)
and the candidate runs in their own transaction and dialect; what those rows
mean is decided here once. Rows carry `queues` as a list (SQLite's JSON text
is decoded by the caller's `to_json`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from tidegate.domain.admission import LocalUsage, admit
from tidegate.domain.backpressure import WorkerSlot, claimable_queues, lowest_free_rank
from tidegate.domain.rates import RateStates
from tidegate.domain.scopes import Rules
from tidegate.storage.shared import claiming

OVERFLOW_DUTY = "overflow"  # the tidegate_locks row of the overflow signal, taken at most once per interval
OVERFLOW_SAMPLE = 100  # queued runs looked at per queue when deciding whether runs wait for a worker

Row = Mapping[str, Any]
ToJSON = Callable[[Any], Any]


class FillOrder:
    """The workers that joined the fill order through this store, with their ranks.

    Only such a worker above rank 0 reads the registry when it claims (nobody
    ranks below rank 0), so the fill order costs nothing when it is off.
    """

    def __init__(self) -> None:
        self._ranks: dict[str, int] = {}

    def registered(self, worker_id: str, rank: int, fill_order: bool) -> None:
        if fill_order:
            self._ranks[worker_id] = rank
        else:
            self._ranks.pop(worker_id, None)

    def left(self, worker_id: str) -> None:
        self._ranks.pop(worker_id, None)

    def member(self, worker_id: str) -> bool:
        return worker_id in self._ranks

    def reads_registry(self, worker_id: str) -> bool:
        """Whether this worker must learn from the registry which queues it may claim from."""
        return self._ranks.get(worker_id, 0) > 0


def rank_for(worker_id: str, live: Mapping[str, int]) -> int:
    """A (re-)registering worker keeps its live rank; a new one takes the lowest free rank."""
    rank = live.get(worker_id)
    return lowest_free_rank(list(live.values())) if rank is None else rank


def worker_slot(row: Row, to_json: ToJSON) -> WorkerSlot:
    return WorkerSlot(row["id"], row["rank"], row["capacity"], row["running"], frozenset(to_json(row["queues"])))


def fill_order_queues(rows: Iterable[Row], worker_id: str, queues: Sequence[str], to_json: ToJSON) -> list[str]:
    """The queues `worker_id` may claim from now, given the live workers' `worker_fill_state` rows:
    all of them unless it is in the fill order."""
    slots = {row["id"]: (bool(row["fill_order"]), worker_slot(row, to_json)) for row in rows}
    mine = slots.get(worker_id)
    if mine is None or not mine[0]:
        return list(queues)
    allowed = claimable_queues(mine[1], [slot for fill, slot in slots.values() if fill])
    return [queue for queue in queues if queue in allowed]


def all_serving_full(rows: Iterable[Row], queues: Sequence[str], to_json: ToJSON) -> int:
    """How many live workers serve any of `queues`, if every one of them is full; else 0."""
    serving = [row for row in rows if set(to_json(row["queues"])) & set(queues)]
    if any(row["running"] < row["capacity"] for row in serving):
        return 0
    return len(serving)


def eligible_backlog(
    rows: Iterable[Row],
    rules: Rules,
    usage: Mapping[str, int],
    rates: RateStates,
    tags_of: ToJSON,
    time_of: Callable[[Any], float],
) -> int:
    """How many of the sampled queued runs the claim policy would admit were there room:
    runs held back by a limit, or by a rate (`rates`: the stored states at the database's
    time), do not count as waiting for a worker."""
    candidates = [
        claiming.to_candidate(row, rules, tags_of(row["tags"]) or {}, time_of(row["scheduled_at"])) for row in rows
    ]
    decision = admit(candidates, usage, rules, LocalUsage(), len(candidates), rate_states=rates.states, now=rates.now)
    return len(decision.admitted)
