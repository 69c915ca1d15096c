"""PostgreSQL: a submit in one round trip, when one statement can decide the whole batch.

Most submits meet no admission ceiling, and a keyed one most often meets either no holder or
only holders it answers as duplicates. Such a batch is one statement (no pipeline of its own):

- plain: `enqueue_free`, which stores the batch while the rules version is the one under which
  the store read that no ceiling applies to its queues (ceilings.py);
- keyed, its keys distinct and none of its claims replacing a holder: `enqueue_unique_free`
  (unique.sql). It reads the keys' rows in its own snapshot (`seen`): a key held there answers
  the batch as duplicates, and it writes and locks nothing (no WAL flush at commit). Otherwise it
  takes the keys' locks (`unique_lock`'s: they serialise it with the full way's lock, holders,
  take), reads the rules version FOR SHARE (as `enqueue_free`) and writes the keys. ON CONFLICT
  sees every committed row, not the snapshot's: it takes over a row only while the row still
  names the run `seen` judged (which held nothing), so a key taken since the snapshot is never
  taken from its run; the runs are stored only if every key was written. A key it wrote for a
  batch it did not store (another key of the batch taken meanwhile) names a run that never
  existed, which holds nothing.

On the store's autocommit connections the statement is its own transaction; on a caller's
connection it is part of the caller's transaction (in a pipeline with the caller's savepoint).
Either way the statement wrote all of the batch or nothing, so its answer is: every run stored; or
each run a duplicate of the holder `domain.unique.plan` names (or its `DuplicateRun`); or, when
the rules moved or the plan would store some runs and not others, None: the caller submits again
the full way (submit_script.py), which judges the same rules under the same locks. None also
when a key was taken since the statement's snapshot: the full way reads its holder.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from tidegate.domain.model import NewRun
from tidegate.domain.unique import Admission, plan
from tidegate.storage.postgres.database import Database
from tidegate.storage.postgres.payloads import enqueue_payload, payload_json
from tidegate.storage.postgres.submit_script import Rows, Step
from tidegate.storage.shared.uniqueness import batch_keys, holders_of, key_rows


def free_version(db: Database, runs: Sequence[NewRun], connection: psycopg.Connection[Any]) -> str | None:
    """The rules version under which no ceiling applies to the runs' queues, reading the ceilings
    on `connection` first if this store has not (one statement: the version and the ceilings of
    one snapshot, which the one-statement submit then finds unmoved, or it stores nothing)."""
    if not db.ceilings.known:
        db.ceilings.read(connection.execute(db.query("enqueue_ceilings")).fetchone())
    return db.ceilings.free_version(queues_of(runs))


async def free_version_async(
    db: Database, runs: Sequence[NewRun], connection: psycopg.AsyncConnection[Any]
) -> str | None:
    """`free_version` over an async connection."""
    if not db.ceilings.known:
        cursor = await connection.execute(db.query("enqueue_ceilings"))
        db.ceilings.read(await cursor.fetchone())
    return db.ceilings.free_version(queues_of(runs))


def queues_of(runs: Sequence[NewRun]) -> list[str]:
    return sorted({run.queue for run in runs})


def free_steps(runs: Sequence[NewRun], version: str | None) -> list[Step] | None:
    """The statements of the one-round-trip submit of `runs` (the last one's rows answer it), or
    None when the batch must go the full way: a ceiling may apply (`version` None), two runs
    share a key, or a run's claim would replace a queued holder (a write of its own)."""
    if version is None or not runs:
        return None
    payload = enqueue_payload(runs)
    claims = [run.unique for run in runs if run.unique is not None]
    if not claims:
        return [Step("enqueue_free", {"runs": payload, "known": version}, read=True)]
    if len(batch_keys(runs)) != len(claims) or any(claim.replaces for claim in claims):
        return None
    # One statement: a held key answered from its snapshot; a new one written under its locks (unique.sql).
    params = {"runs": payload, "keys": payload_json(key_rows(runs)), "known": version}
    return [Step("enqueue_unique_free", params, read=True)]


def free_answers(runs: Sequence[NewRun], rows: Rows) -> list[Admission] | None:
    """Each run's answer from the last statement's rows, or None: submit again the full way.
    Raises `DuplicateRun` for a run that says "raise" and met a holder (nothing was written)."""
    if not any(run.unique is not None for run in runs):
        stored = bool(rows and rows[0][0])
        return [Admission(run.id) for run in runs] if stored else None
    if any(row[0] for row in rows):  # the head row (stored, same rules): stored, keys and all
        return [Admission(run.id) for run in runs]
    holders = holders_of([row[2:5] for row in rows if row[0] is None])
    if not holders:  # nothing held, nothing stored: the rules moved, or a key was taken since the snapshot
        return None
    decided = plan(runs, holders)
    if decided.store or decided.replace:  # some runs are new: they go the full way, under the locks again
        return None
    return decided.answers
