"""PostgreSQL claim reads: what a claim reads before `admit` decides, and when it is sent.

The first reads a claim needs (the head of each queue as `claiming` reads it
first, the partitions past a head the last claim found all waiting, the usage
hint, this worker's own counts, the load of fair lanes) are sent ahead, in
the cycle's first batch, as the cached rules call for them;
every read `claiming` asks for that was not sent ahead is read when asked:
what is sent ahead only saves round trips, it never decides anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tidegate.domain.admission import LocalUsage
from tidegate.domain.claim_plan import ClaimPlan, plan
from tidegate.domain.scopes import Rules
from tidegate.storage.postgres.payloads import claim_order, excluded_json, lane_load, local_usage, uses_tags
from tidegate.storage.shared import claiming

# (queue, size, excluded tags, suspects read, held rate partitions)
Window = tuple[str, int, tuple[tuple[str, str], ...], bool, tuple[str, ...]]
Head = tuple[str, str, tuple[tuple[str, str], ...]]  # (queue, partition, excluded tags)
Full = tuple[str, ...]  # full partitions, in key order
Excluded = tuple[tuple[str, str], ...]  # (key, value) of full tags
Partitioned = tuple[Full, Excluded]  # how a claim asked for a queue's partitions


class ClaimReads:
    """The candidate reads of one claim inside its transaction, and what they found."""

    def __init__(
        self,
        connection: psycopg.Connection[Any],
        query: Callable[[str], str],
        worker_id: str,
        queues: list[str],
        limit: int,
        margin: bool,
    ) -> None:
        self.connection = connection
        self.query = query
        self.worker_id = worker_id
        self.queues = queues
        self.limit = limit
        self.margin = margin  # read past the claim limit (QueuePlan.window)
        self.plan = plan(queues, Rules())  # the claim's plan, on the rules it read (claim.py)
        self.hint: dict[str, int] = {}  # slots in use when read: what to read; exact only for scopes locked ahead
        self.local = LocalUsage()
        self.lanes: dict[tuple[str, str], int] | None = None
        self.windows: dict[Window, list[dict[str, Any]]] = {}
        self.heads: dict[Head, tuple[int, list[dict[str, Any]]]] = {}
        self.tag_sets: dict[str, dict[str, str]] = {}  # each tags text read, parsed once
        self.partition_lists: dict[tuple[str, Full, Excluded], list[str]] = {}
        self.partitioned: dict[str, Partitioned] = {}  # queue -> how `claiming` asked for its partitions

    @property
    def rules(self) -> Rules:
        return self.plan.rules

    def reader(self) -> claiming.CandidateReader:
        return claiming.CandidateReader(self.window, self.partitions, self.partition_head)

    def send(
        self, claim: ClaimPlan, lock_ahead: Callable[[], list[str]], partitioned: dict[str, Partitioned]
    ) -> dict[str, Any]:
        """Queue (without waiting) the reads this plan will ask for first: the head of each
        queue as `claiming` reads it first, the partitions of the queues whose last claim read
        them past a head all waiting (`partitioned`, as it asked), the scope locks sent ahead
        (`lock_ahead`, after the runs: run rows come first in the lock order) and usage, this
        worker's counts, fair lanes."""
        connection, rules = self.connection, claim.rules
        sent: dict[str, Any] = {"windows": []}
        limited = [queue.name for queue in claim.open if queue.limited]
        plain = [queue for queue in claim.open if not queue.fair]
        sent_plain = {queue.name for queue in plain}
        if plain:
            sizes = [queue.window(self.limit, self.margin) for queue in plain]
            cursor = connection.cursor(row_factory=dict_row).execute(
                self.query("claim_window"),
                {
                    "queues": [queue.name for queue in plain],
                    "sizes": sizes,
                    "tags": uses_tags(rules),
                    "excluded": "[]",
                    "suspects": True,
                    "held": [],
                },
            )
            sent["windows"] = [(queue.name, size, cursor) for queue, size in zip(plain, sizes, strict=True)]
        sent["partitions"] = [
            (
                queue,
                saturated,
                excluded,
                self._send_partitions(queue, claiming.MAX_PARTITIONS, saturated, excluded, rules),
            )
            for queue, (saturated, excluded) in partitioned.items()
            if queue in limited and queue in sent_plain
        ]
        if limited:
            sent["ahead"] = lock_ahead()
            sent["hint"] = connection.execute(self.query("scope_usage_held"), {"held": sent["ahead"]})
        if claim.local_counts:
            sent["local"] = connection.execute(self.query("local_usage"), {"worker": self.worker_id})
        fair = claim.fair_lanes
        if fair:
            sent["lanes"] = connection.execute(self.query("lane_load"), {"queues": fair})
        return sent

    def receive(self, sent: dict[str, Any]) -> None:
        rows_of: dict[str, list[dict[str, Any]]] = {}
        cursors = {id(cursor): cursor for _, _, cursor in sent["windows"]}
        for cursor in cursors.values():
            for row in self._parsed(cursor.fetchall()):
                rows_of.setdefault(row["queue"], []).append(row)
        for queue, size, _ in sent["windows"]:
            self.windows[(queue, size, (), True, ())] = rows_of.get(queue, [])
        for queue, saturated, excluded, cursor in sent["partitions"]:
            self._receive_partitions(queue, saturated, excluded, cursor)
        if "hint" in sent:
            self.hint = dict(sent["hint"].fetchall())  # the usage of the scopes locked ahead: ScopeLocks.held
        if "local" in sent:
            self.local = local_usage(sent["local"])
        if "lanes" in sent:
            self.lanes = lane_load(sent["lanes"])

    def window(
        self, queue: str, size: int, excluded: Sequence[tuple[str, str]], suspects: bool, held: Sequence[str]
    ) -> list[dict[str, Any]]:
        key = (queue, size, tuple(excluded), suspects, tuple(held))
        if key not in self.windows:
            params = {
                "queues": [queue],
                "sizes": [size],
                "tags": uses_tags(self.rules),
                "excluded": excluded_json(excluded),
                "suspects": suspects,
                "held": list(held),
            }
            cursor = self.connection.cursor(row_factory=dict_row)
            self.windows[key] = self._parsed(cursor.execute(self.query("claim_window"), params).fetchall())
        return self.windows[key]

    def partitions(self, queue: str, size: int) -> list[str]:
        """The partitions of a queue, with their heads read (and locked) in the same statement.

        Reads each head as `claiming` will ask for it (one run of a full
        partition, a fair share of the claim limit of the others, runs of
        full tags left out); any head asked for differently is read again.
        The read sent ahead (`send`) serves when it was sent for the same
        full partitions and tags as the usage read now shows.
        """
        saturated = tuple(
            sorted(
                claiming.saturated_partitions(queue, self.hint, self.rules)
                | claiming.locally_full_partitions(queue, self.local, self.rules)
            )
        )
        excluded = tuple(claiming.saturated_tags(self.hint, self.rules))
        self.partitioned[queue] = (saturated, excluded)
        known = self.partition_lists.get((queue, saturated, excluded))
        if known is not None and size == claiming.MAX_PARTITIONS:
            return known
        cursor = self._send_partitions(queue, size, saturated, excluded, self.rules)
        return self._receive_partitions(queue, saturated, excluded, cursor)

    def _send_partitions(
        self, queue: str, size: int, saturated: Full, excluded: Excluded, rules: Rules
    ) -> psycopg.Cursor[dict[str, Any]]:
        params = {
            "queue": queue,
            "limit": size,
            "saturated": list(saturated),
            "claim_limit": self.limit,
            "tags": uses_tags(rules),
            "excluded": excluded_json(excluded),
        }
        return self.connection.cursor(row_factory=dict_row).execute(self.query("claim_partitions"), params)

    def _receive_partitions(
        self, queue: str, saturated: Full, excluded: Excluded, cursor: psycopg.Cursor[dict[str, Any]]
    ) -> list[str]:
        heads: dict[str, tuple[int, list[dict[str, Any]]]] = {}
        for row in self._parsed(cursor.fetchall()):
            key, per_partition = row.pop("key"), row.pop("per_partition")
            read, rows = heads.setdefault(key, (1 if key in saturated else per_partition, []))
            if row["id"] is not None:
                rows.append(row)
        for key, (read, rows) in heads.items():
            rows.sort(key=claim_order)
            self.heads[(queue, key, excluded)] = (read, rows)
        found = self.partition_lists[(queue, saturated, excluded)] = sorted(heads)  # bytewise, as the index
        return found

    def partition_head(
        self, queue: str, partition: str, size: int, excluded: Sequence[tuple[str, str]]
    ) -> list[dict[str, Any]]:
        known = self.heads.get((queue, partition, tuple(excluded)))
        if known is not None and (known[0] >= size or len(known[1]) < known[0]):
            return known[1][:size]  # read as many as asked, or all there were
        params = {
            "queue": queue,
            "partition": partition,
            "limit": size,
            "tags": uses_tags(self.rules),
            "excluded": excluded_json(excluded),
        }
        cursor = self.connection.cursor(row_factory=dict_row)
        return self._parsed(cursor.execute(self.query("claim_partition_head"), params).fetchall())

    def _parsed(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows with their tags as a mapping, each distinct text parsed once (rows of one
        tag set share it: nothing downstream changes a run's tags)."""
        known = self.tag_sets
        for row in rows:
            text = row["tags"]
            if text is not None:
                tags = known.get(text)
                if tags is None:
                    tags = known[text] = json.loads(text)
                row["tags"] = tags
        return rows
