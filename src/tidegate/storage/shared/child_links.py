"""Unique children, shared by both adapters' children.py: which of a trigger's children are stored
and which are linked to the run already holding their key.

A child of a task declared `unique=` (or triggered with a unique or idempotency key) meets its
key as every submit does (`domain.unique.plan`, over the holders read under the keys' locks):
with no holder it is stored and takes the key; with one, nothing is stored at its position but a
link (`tidegate_child_links`: parent, position -> the holder), whatever run the holder is (a
submitted run, another parent's child, a child of this very trigger). The parent's replay, wait
and resume read links beside its own children; `on_conflict="raise"` raises `DuplicateRun` in the
parent's code (the trigger stores nothing); "replace" and a debounce give a queued holder the
child's args, as a submit would.

A link is no ownership: a cancel of the parent follows `parent_id` only, so a holder it did not
create runs on (other parents, or the submitter, may be waiting on it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tidegate.domain.children import ChildRecord, NewChild
from tidegate.domain.model import NewRun, RunStatus
from tidegate.domain.unique import Holder, plan
from tidegate.storage.shared.uniqueness import batch_keys

Row = Any  # a `trigger_children_holders` row read by name (dict or sqlite3.Row)
Shape = tuple[str, str, Mapping[str, str]]


def child_keys(children: Sequence[NewChild]) -> list[str]:
    """The keys a trigger locks and reads the holders of (every child asked for, stored or not:
    which are new is known only once the parent's children are read, after the locks)."""
    return batch_keys([child.run for child in children])


@dataclass(frozen=True, slots=True)
class KeyedChildren:
    """A trigger's new children, sorted: `store` (each with the args its key's last child gave it),
    `links` (child, holder's id), `replace` (stored holders given a child's args) and each linked
    child's record and shape as the parent sees it."""

    store: list[NewChild]
    links: list[tuple[NewChild, str]]
    replace: list[tuple[str, NewRun]]
    records: dict[int, ChildRecord]  # by position: the linked children
    shapes: dict[str, Shape]  # by holder id: what a wait on it decides its scopes by


def sort_keyed(new: Sequence[NewChild], rows: Sequence[Row], to_json: Callable[[Any], Any]) -> KeyedChildren:
    """Decide each new child against the holders (`rows`: key, id, status, queue, partition_key,
    tags, result, error); raises DuplicateRun for a child whose key says "raise" and meets one."""
    decided = plan([child.run for child in new], {row["key"]: Holder(row["id"], row["status"]) for row in rows})
    stored_runs = {run.id: run for run in decided.store}
    by_id = {row["id"]: row for row in rows}
    store: list[NewChild] = []
    links: list[tuple[NewChild, str]] = []
    records: dict[int, ChildRecord] = {}
    shapes: dict[str, Shape] = {}
    for child, answer in zip(new, decided.answers, strict=True):
        if not answer.duplicate:
            store.append(replace(child, run=stored_runs[child.run.id]))
            continue
        links.append((child, answer.run_id))
        row = by_id.get(answer.run_id)
        if row is None:  # the holder is a child this trigger stores
            holder = stored_runs[answer.run_id]
            status, queue, result, error = RunStatus.QUEUED, holder.queue, None, None
            shapes[holder.id] = (holder.queue, holder.partition, holder.tags)
        else:
            queued = answer.replaced  # a replaced holder was queued, and still is
            status = RunStatus.QUEUED if queued else RunStatus(row["status"])
            queue, result, error = row["queue"], to_json(row["result"]), row["error"]
            shapes[row["id"]] = (row["queue"], row["partition_key"], to_json(row["tags"]) or {})
        call = child.run
        records[child.index] = ChildRecord(
            answer.run_id, child.index, call.task, queue, call.args, status, child.awaited, result, error, linked=True
        )
    return KeyedChildren(store, links, decided.replace, records, shapes)


def unkeyed(new: Sequence[NewChild]) -> KeyedChildren:
    """A trigger whose children carry no key: all are stored."""
    return KeyedChildren(list(new), [], [], {}, {})


def link_rows(links: Sequence[tuple[NewChild, str]]) -> list[dict[str, Any]]:
    """`trigger_children_link`'s rows (args still a JSON value: each adapter encodes it)."""
    return [
        {"child_index": child.index, "run_id": holder, "task": child.run.task, "args": child.run.args,
         "awaited": child.awaited}
        for child, holder in links
    ]  # fmt: skip
