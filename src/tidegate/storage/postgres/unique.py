"""PostgreSQL: a keyed submit (once per key, domain/unique.py) in one transaction.

The batch takes one advisory lock per key, in key order; the next statement reads which keys
are still held (READ COMMITTED: it sees every submit of those keys that committed before the
locks were granted); the domain's `plan` decides each run; then the holders to replace are
updated, the new runs stored by `enqueue`'s own statements (its admission ceilings included)
and the keys taken. A refusal, a `DuplicateRun` or any error rolls the whole batch back.
The plain submit (`runs.py`) is untouched: only a batch with a key comes here.
"""

from __future__ import annotations

from collections.abc import Sequence

from tidegate.domain.jsonvalue import dumps
from tidegate.domain.model import NewRun
from tidegate.domain.transitions import Ceiling
from tidegate.domain.unique import Admission, plan
from tidegate.storage.postgres.activity import read_pace
from tidegate.storage.postgres.database import Aggregate
from tidegate.storage.postgres.payloads import enqueue_payload, payload_json
from tidegate.storage.postgres.pipeline import transaction
from tidegate.storage.uniqueness import batch_keys, holders_of, key_rows, replace_params


class Unique(Aggregate):
    """The keyed submit of the storage port."""

    def enqueue_unique(self, runs: Sequence[NewRun]) -> list[Admission]:
        keys = batch_keys(runs)
        with self._connection() as connection, transaction(connection):
            connection.execute(self._q("unique_lock"), {"keys": keys})
            held = connection.execute(self._q("unique_holders"), {"keys": keys}).fetchall()
            decided = plan(runs, holders_of(held))
            answers = list(decided.answers)
            for holder_id, run in decided.replace:
                params = replace_params(holder_id, run)
                updated = connection.execute(self._q("unique_replace"), {**params, "args": dumps(run.args)}).fetchone()
                if updated is None:  # started since it was read: it stays as it is, a duplicate
                    answers = [_kept(answer, holder_id) for answer in answers]
            if decided.store:
                connection.execute(self._q("enqueue_fence"))
                queues = sorted({run.queue for run in decided.store})
                connection.execute(self._q("enqueue_lock"), {"queues": queues})
                refused = connection.execute(self._q("enqueue"), {"runs": enqueue_payload(decided.store)}).fetchone()
                if refused is not None:
                    queue, active, limit, incoming = refused
                    raise Ceiling(queue, limit, incoming).rejection(active, read_pace(connection, self._q, queue=queue))
                connection.execute(self._q("unique_take"), {"keys": payload_json(key_rows(decided.store))})
        return answers


def _kept(answer: Admission, holder_id: str) -> Admission:
    return Admission(answer.run_id, duplicate=True) if answer.run_id == holder_id and answer.replaced else answer
