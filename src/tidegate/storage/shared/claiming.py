"""Choosing the candidates a claim considers, shared by both adapters.

The decision itself is pure (`domain.admission.admit`); what this module
decides is which queued rows to hand it, so that the read stays cheap when a
large backlog is blocked: a window in claim order per queue, and, when that
window is full of runs whose partition is saturated, the heads of the other
partitions found by skip-scan (one index seek per partition) instead of
walking the blocked backlog; likewise past runs of a rate partition, or of
a tag rate, whose stored state refuses a start now (one key's blocked
backlog must not hide another key's runs). Fair queues are always read per partition.
Which queues are read, and how much of each first, is the claim plan's
(`domain.claim_plan`): paused queues are not read at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidegate.domain.admission import Admission, Candidate, LocalUsage
from tidegate.domain.blocking import RATE_COST
from tidegate.domain.claim_plan import ClaimPlan
from tidegate.domain.integers import STORED_INT_MAX
from tidegate.domain.rates import RateStates, window_key
from tidegate.domain.saturation import Saturation
from tidegate.domain.scopes import GLOBAL, TAG_RATE_PREFIX, Rules, queue_scope, rate_scope
from tidegate.domain.transitions import has_room

MAX_PARTITIONS = 1000
# Rate states read for a verdict are those with a TAT after now less this (ns): the filter is
# coarse (a float clock in SQL), the exact test is `domain.rates`.
STATE_SLACK_NS = 10**6

Row = Mapping[str, Any]


class CandidateReader:
    """The reads an adapter provides (inside its claim transaction).

    `window(queue, size, excluded_tags, suspects, held_rates)` and
    `partition_head(queue, partition, size, excluded_tags)` return queued, due
    runs in claim order, leaving out runs that carry any (key, value) of
    `excluded_tags` (tags whose scope is full: reading them would only fill the
    window with runs that must wait), for a window read without `suspects`,
    every suspect, and runs of the rate partitions `held_rates` (their rate
    refuses a start now).
    """

    def __init__(
        self,
        window: Callable[[str, int, Sequence[tuple[str, str]], bool, Sequence[str]], Sequence[Row]],
        partitions: Callable[[str, int], Sequence[str]],
        partition_head: Callable[[str, str, int, Sequence[tuple[str, str]]], Sequence[Row]],
    ) -> None:
        self.window = window
        self.partitions = partitions
        self.partition_head = partition_head


@dataclass
class Candidates:
    rows: list[Row]
    exhausted: bool  # some window came back full: more runs may be claimable right after this claim


def candidate_rows(
    plan: ClaimPlan,
    claim_limit: int,
    usage: Mapping[str, int],
    read: CandidateReader,
    local: LocalUsage | None = None,
    margin: bool = True,
    rates: RateStates | None = None,
) -> Candidates:
    """The rows worth deciding on, at most a window per queue plus partition heads.

    For a queue no limit applies to, the window is just the claim limit.
    Otherwise it is wider, and when its head is all waiting, runs of full tags
    are skipped in a second read and partitions that are full (shared limit,
    or this worker's local limit) are stepped over by reading the other
    partitions' heads. The queues read and the size of each first read are
    the plan's (`QueuePlan.window`, which says what `margin` does). Runs of a
    rate partition that `rates` (the stored states, a hint read before) says
    may not start now are stepped over too, in the same second read.
    """
    rules = plan.rules
    local = local or LocalUsage()
    if claim_limit <= 0:
        return Candidates([], False)
    global_full = _full(usage, GLOBAL, rules.global_limit())
    excluded = saturated_tags(usage, rules)
    if rates:
        excluded = sorted({*excluded, *held_tag_rates(rules, rates)})
    rows: dict[str, Row] = {}
    exhausted = False
    for queue_plan in plan.open:
        queue = queue_plan.name
        max_workers = rules.max_workers(queue)
        if max_workers is not None and local.per_queue.get(queue, 0) >= max_workers:
            continue  # this worker may take no more of this queue
        saturated = saturated_partitions(queue, usage, rules) | locally_full_partitions(queue, local, rules)
        if queue_plan.fair:
            found = _partition_heads(queue, claim_limit, saturated, excluded, read)
        else:
            # Where no limit applies nothing can be skipped, so reading past the claim limit
            # would be waste; where one does, the wider window also records block reasons.
            window = queue_plan.window(claim_limit, margin)
            # The head of the queue as it is (its blocked runs get their block reasons) ...
            found = list(read.window(queue, window, (), True, ()))
            exhausted |= len(found) == window
            held = held_rate_partitions(queue, rules, rates) if rates else []
            suspects, useful = _head_of(found, saturated, excluded, held)
            if len(found) == window and useful < claim_limit and not global_full:
                # ... and, when that head is all waiting, what lies past it: past runs of full tags
                # and of held rate partitions, and past suspects (this worker may be running
                # another group's: domain/admission.py).
                if excluded or suspects or held:
                    found += read.window(queue, window, excluded, not suspects, held)
                if saturated:
                    found += _partition_heads(queue, claim_limit, saturated, excluded, read)
        for row in found:
            rows.setdefault(row["id"], row)
    return Candidates(list(rows.values()), exhausted)


def admit_sizes(plan: ClaimPlan, claim_limit: int, ahead: int) -> tuple[int, int]:
    """The capacity and the runs ahead `admit` decides a claim of up to `claim_limit` with, `ahead`
    of them past the worker's free slots (`CycleRequest.claim_ahead`); their sum is the claim
    limit its reads are sized from. A free claim takes the first runs in claim order, those ahead
    as any (`ClaimPlan.free`); any other its free slots' worth and, past them, only runs `admit`
    lets wait ahead: none without a free slot (postgres/claims.py then only reports), nor where
    no open queue's runs may wait (`ClaimPlan.takes_ahead`: a rated queue's read stays its free
    slots' worth), nor more than a binding queue limit lets any claim take (`ClaimPlan.most_ahead`)."""
    if plan.free:
        return claim_limit, 0
    free = max(0, claim_limit - ahead)
    if not (free and plan.takes_ahead):
        return free, 0
    most = plan.most_ahead
    return free, ahead if most is None else min(ahead, most)


def room_after(decision: Admission, usage: Mapping[str, int], read: int, claim_limit: int) -> int | None:
    """The fewest free slots any scope of the admitted runs has left once they run (STORED_INT_MAX,
    more than any limit, when they need none: a queue only a rate or a per-worker cap limits);
    None when the claim held a run back (a full scope, a rate, a local cap, another group's
    suspect) while it had room for it.

    A claim of at most that many that reads only its claim limit (no margin)
    can then be cut short only by claims made since (or a rate that ran out
    since); it blocks runs, and the claim after it reads the margin again."""
    if decision.blocked or len(decision.admitted) < min(claim_limit, read):
        return None
    in_use = dict(usage)
    limits: dict[str, int] = {}
    for _, needs in decision.admitted:
        for need in needs:
            in_use[need.key] = in_use.get(need.key, 0) + 1
            limits[need.key] = need.limit
    return min((limit - in_use[key] for key, limit in limits.items()), default=STORED_INT_MAX)


def reads_margin(room: int | None, claim_limit: int) -> bool:
    """Whether a claim reads its window's margin (`QueuePlan.window`) after one of the same queues
    that left `room` (`room_after`): unless that one held nothing back and left room for this
    one in every scope it used."""
    return room is None or room < claim_limit


def shapes(rows: Sequence[Row]) -> list[tuple[str, str, Mapping[str, str]]]:
    """The (queue, partition, tags) of the rows' runs (tags parsed), each once: runs of one shape
    need the same scopes (`ClaimPlan.needed_keys`)."""
    found = {(row["queue"], row["partition_key"], tuple(sorted((row["tags"] or {}).items()))) for row in rows}
    return [(queue, partition, dict(tags)) for queue, partition, tags in sorted(found)]


def _partition_heads(
    queue: str, claim_limit: int, saturated: set[str], excluded: Sequence[tuple[str, str]], read: CandidateReader
) -> list[Row]:
    """The first runs of each partition: enough of each to fill `claim_limit` taking turns.

    A saturated partition still shows its head, so its block reason is recorded.
    """
    partitions = list(read.partitions(queue, MAX_PARTITIONS))
    open_partitions = max(1, sum(1 for partition in partitions if partition not in saturated))
    per_partition = min(claim_limit, -(-claim_limit // open_partitions) + 1)
    heads: list[Row] = []
    for partition in partitions:
        size = 1 if partition in saturated else per_partition
        heads.extend(read.partition_head(queue, partition, size, excluded))
    return heads


def _head_of(
    found: Sequence[Row], saturated: set[str], excluded: Sequence[tuple[str, str]], held: Sequence[str]
) -> tuple[bool, int]:
    """Whether a window's rows hold a suspect, and how many of them a claim could take: not a
    suspect, not of a saturated or held partition, carrying no excluded tag (one plain loop:
    every claimed run passes here)."""
    suspects, useful = False, 0
    for row in found:
        if row["suspect"]:
            suspects = True
        elif row["partition_key"] not in saturated and row["rate_key"] not in held:
            useful += not (excluded and _carries(row, excluded))
    return suspects, useful


def _carries(row: Row, tags: Sequence[tuple[str, str]]) -> bool:
    if not tags:
        return False
    held = row_tags(row)
    return any(held.get(key) == value for key, value in tags)


def held_rate_partitions(queue: str, rules: Rules, rates: RateStates) -> list[str]:
    """The partitions of `queue`'s rate whose stored state refuses a start now (`domain.rates`),
    in order: like a saturated partition, the read steps over their runs."""
    if not rules.rates(queue):
        return []
    prefix = rate_scope(queue, "")
    scopes = {scope for scope, _ in rates.states if scope == prefix or scope.startswith(prefix + "/")}
    held = [scope for scope in scopes if rates.refuses(scope, rules.rate_windows(scope), RATE_COST)]
    return sorted(scope[len(prefix) + 1 :] for scope in held)


def held_tag_rates(rules: Rules, rates: RateStates) -> list[tuple[str, str]]:
    """(key, value) of every tag rate whose stored state refuses a start now: like a full tag,
    the read steps over the runs that carry it."""
    held = []
    for scope in {scope for scope, _ in rates.states if scope.startswith(TAG_RATE_PREFIX)}:
        key, _, value = scope[len(TAG_RATE_PREFIX) :].partition("=")
        if rates.refuses(scope, rules.rate_windows(scope), RATE_COST):
            held.append((key, value))
    return sorted(held)


def locally_full_partitions(queue: str, local: LocalUsage, rules: Rules) -> set[str]:
    """Partitions where this worker is at the queue's local limit."""
    limit = rules.local_limit(queue)
    if limit is None:
        return set()
    return {partition for (name, partition), count in local.per_partition.items() if name == queue and count >= limit}


def saturated_tags(usage: Mapping[str, int], rules: Rules) -> list[tuple[str, str]]:
    """(key, value) of every tag scope at its limit."""
    full = []
    for scope in usage:
        if scope.startswith("tag:"):
            key, _, value = scope[len("tag:") :].partition("=")
            if _full(usage, scope, rules.tag_limit(key, value)):
                full.append((key, value))
    return sorted(full)


def saturated_partitions(queue: str, usage: Mapping[str, int], rules: Rules) -> set[str]:
    """Partitions of `queue` whose shared limit is reached (only scopes with holders can be)."""
    prefix = f"queue:{queue}"
    found = set()
    for scope in usage:
        if scope == prefix:
            partition = ""
        elif scope.startswith(prefix + "/"):
            partition = scope[len(prefix) + 1 :]
        else:
            continue
        if _full(usage, queue_scope(queue, partition), rules.queue_limit(queue, partition)):
            found.add(partition)
    return found


def _full(usage: Mapping[str, int], scope: str, limit: int | None) -> bool:
    return not has_room(usage.get(scope, 0), limit)


def suspect_ids(rows: Sequence[Row]) -> list[str]:
    """The suspects among a claim's candidates: the claim then reads their groups, and the group
    this worker runs, for `admit` (a worker runs one group of suspects at a time)."""
    return [row["id"] for row in rows if row["suspect"]]


def to_candidate(
    row: Row, rules: Rules, tags: Mapping[str, str], scheduled_at: float, group: str | None = None
) -> Candidate:
    config = rules.queues.get(row["queue"])
    return Candidate(
        id=row["id"],
        task=row["task"],
        queue=row["queue"],
        partition=row["partition_key"],
        tags=tags,
        priority=row["priority"],
        scheduled_at=scheduled_at,
        ordering=config.ordering if config is not None else "priority",
        suspect=bool(row["suspect"]),
        group=group,
        resumed=bool(row["resumed"]),
        rate_partition=row["rate_key"],
        rate_cost=row["rate_cost"],
    )


def rate_keys(rows: Sequence[Row], rules: Rules) -> list[tuple[str, int]]:
    """The (rate scope, window in ns) of every rate window the rows' runs would be charged (their
    queues' and their tags'), each once, in key order: the order a claim locks their stored
    states in."""
    if not rules.charges_rates:
        return []  # nothing to charge: no row's tags need be read
    # Runs of one rate partition with the same tags are charged the same windows: each such
    # shape's tags are read and its rates looked up once, not once per row of the window.
    by_shape: dict[tuple[str, str, object], Row] = {}
    for row in rows:
        raw = row["tags"]
        tags = raw if isinstance(raw, str) else tuple(sorted((raw or {}).items()))
        by_shape.setdefault((row["queue"], row["rate_key"], tags), row)
    keys = {
        (scope, window_key(rate))
        for row in by_shape.values()
        for scope, windows in rules.rate_scopes(row["queue"], row["rate_key"], row_tags(row))
        for rate in windows
    }
    return sorted(keys)


def ahead_rate_keys(plan: ClaimPlan, claim_turns: Collection[str]) -> list[tuple[str, int]]:
    """The rate windows a claim holding `claim_turns` locks before it reads a run, in key order:
    every window its runs may be charged, when the rules name them all without reading a run (no
    tag rate, every rated open queue one budget whose turn it holds: a queue's rate is charged
    only under its turn). Otherwise none: a window locked after the runs are read could sort
    below one locked ahead, and a refund (hand-back, cost report) locks a run's windows in key
    order, so waiting for it could close a circle."""
    rules = plan.rules
    rated = [queue.name for queue in plan.open if rules.rates(queue.name)]
    if rules.run_queue.tag_rate_limits or not rated:
        return []
    if any(queue not in claim_turns or rules.queues[queue].rate_partition.enabled for queue in rated):
        return []
    return rate_keys([{"queue": queue, "rate_key": "", "tags": None} for queue in rated], rules)


def row_tags(row: Row) -> Mapping[str, str]:
    """A row's tags as a mapping (a store may hand them over as JSON text)."""
    raw = row["tags"]
    return json.loads(raw) if isinstance(raw, str) else (raw or {})


def charges_json(decision: Admission) -> str:
    """Per claimed run, the rate windows it was charged ({id: [[scope, window, before, after, cost]]}):
    stored on the run, so a claim undone before the start can give them back (`domain.rates.Charge`)."""
    return json.dumps(decision.charges, separators=(",", ":"))  # a `Charge` is written as its fields


def reason_json(saturations: Sequence[Saturation]) -> str:
    return json.dumps([saturation_json(s) for s in saturations], separators=(",", ":"))


def saturation_json(saturation: Saturation) -> dict[str, object]:
    """A block reason's item: {"scope", "used", "limit"}, and a rate's "per" and "retry_at"."""
    item: dict[str, object] = {"scope": saturation.scope, "used": saturation.used, "limit": saturation.limit}
    if saturation.per is not None:
        item.update(per=saturation.per, retry_at=saturation.retry_at)
    return item


def changed_block_reasons(decision: Admission, current: Mapping[str, Any]) -> dict[str, str]:
    """Block reasons (as JSON text) that differ from what the rows hold now, apart from a rate's
    `retry_at` (`same_reason`)."""
    changed = {}
    for run_id, saturations in decision.blocked.items():
        items = [saturation_json(s) for s in saturations]
        existing = current.get(run_id)
        if existing is None or not same_reason(json.loads(existing) if isinstance(existing, str) else existing, items):
            changed[run_id] = json.dumps(items, separators=(",", ":"))
    return changed


def same_reason(stored: object, items: Sequence[Mapping[str, object]]) -> bool:
    """Whether a stored block reason names the same scopes, counts and windows as `items`.

    A rate's `retry_at` is left out: it is when the claim that wrote the reason saw the
    next start allowed, and every charge moves it, so a paced backlog's claims would
    otherwise rewrite every rate-held run they read (and log a RunBlocked for each) at
    every claim. The block reason is the run's history, not what surfaces show: they
    read the wait live from the rate states (`domain.blocking.rate_check`).
    """

    def without_time(item: object) -> object:
        return {k: v for k, v in item.items() if k != "retry_at"} if isinstance(item, dict) else item

    if not isinstance(stored, list) or len(stored) != len(items):
        return False
    return all(without_time(old) == without_time(new) for old, new in zip(stored, items, strict=True))
