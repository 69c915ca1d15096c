"""When no queued run of a worker's queues can be admitted: proofs from the scopes every run needs.

Two callers ask, on both adapters:

- a claim that came back short, whether to claim again at once (`more`):
  only when the window, not a limit, cut it short;
- a worker woken with nothing to report, whether to claim at all
  (`peek_cycle`, storage/*/guard.py): a claim takes the claim turn and locks
  window rows even when it can admit nothing.

A wrong "nothing" would leave runs waiting for the next wake-up or poll, so
only proofs that hold for every queued run of a queue count, however much of
it was read:

- the queue is paused;
- the global cap is full: every run needs `global`;
- the queue holds no queued run at all (when the caller read that: `empty`);
- this worker runs `max_workers` runs of the queue;
- the shared limit of a queue that is not partitioned is full, and no queued
  run of it carries an explicit concurrency key (such a run has a scope of its
  own, `queue:NAME/key=...`, with room of its own): only when the caller
  knows that (`unkeyed`).

Partitioned queue limits, tag limits and per-partition local limits never
close a queue: a run not read may fall in a partition, or carry tags, with room.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from tidegate.domain.admission import Admission, LocalUsage
from tidegate.domain.scopes import GLOBAL, Rules, queue_scope
from tidegate.domain.transitions import has_room


def shared_limit_binds_all(queue: str, rules: Rules) -> bool:
    """Whether the queue's one shared limit binds every run of it that has no concurrency key."""
    config = rules.queues.get(queue)
    partitioned = config is not None and config.concurrency.partition.enabled
    return not partitioned and rules.queue_limit(queue, "") is not None


def closing_scopes(queues: Sequence[str], rules: Rules) -> list[str] | None:
    """The scopes whose usage could prove every open queue of `queues` closed, in key order;
    None when some open queue has none (then nothing can be proven without reading its runs).

    `max_workers` is left out: it needs this worker's own counts, which a claim reads."""
    keys: set[str] = set()
    for queue in queues:
        if rules.is_paused(queue):
            continue
        own = []
        if rules.global_limit() is not None:
            own.append(GLOBAL)
        if shared_limit_binds_all(queue, rules):
            own.append(queue_scope(queue, ""))
        if not own:
            return None
        keys.update(own)
    return sorted(keys)


def all_closed(
    queues: Sequence[str],
    rules: Rules,
    usage: Mapping[str, int],
    running: Mapping[str, int],
    unkeyed: Collection[str],
    empty: Collection[str] = (),
) -> bool:
    """Whether no queued run of any of `queues` can be admitted, given the slots in use per scope
    (`usage`), the runs this worker runs per queue (`running`), the queues known to hold no
    queued run with a concurrency key (`unkeyed`) and those known to hold no queued run (`empty`)."""
    global_full = not has_room(usage.get(GLOBAL, 0), rules.global_limit())
    for queue in queues:
        if rules.is_paused(queue) or global_full or queue in empty:
            continue
        max_workers = rules.max_workers(queue)
        if max_workers is not None and running.get(queue, 0) >= max_workers:
            continue
        if (
            queue in unkeyed
            and shared_limit_binds_all(queue, rules)
            and not has_room(usage.get(queue_scope(queue, ""), 0), rules.queue_limit(queue, ""))
        ):
            continue
        return False
    return True


def nothing_more(
    queues: Sequence[str], rules: Rules, usage: Mapping[str, int], local: LocalUsage, decision: Admission
) -> bool:
    """After a claim admitted `decision.admitted` on `usage` (slots in use before it, read under
    the claim's locks), whether claiming again at once is sure to admit nothing.

    The runs past the window were not read, so whether they carry a concurrency
    key is unknown: a full shared queue limit proves nothing here (a woken
    worker's `peek_cycle` reads that, and stops there).
    """
    after = dict(usage)
    running = dict(local.per_queue)
    for candidate, needs in decision.admitted:
        for need in needs:
            after[need.key] = after.get(need.key, 0) + 1
        running[candidate.queue] = running.get(candidate.queue, 0) + 1
    return all_closed(queues, rules, after, running, unkeyed=())
