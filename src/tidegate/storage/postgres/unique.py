"""PostgreSQL: a keyed submit (once per key, domain/unique.py).

Most keyed batches take one statement in one round trip (free_submit.py): `enqueue_unique_free`
answers a key held in its snapshot as a duplicate (writing nothing), and otherwise takes the
keys' locks and writes the keys and the batch (ON CONFLICT: a key taken since its snapshot stops
it, and the full way answers). A batch that statement cannot decide (a ceiling applies, two
runs share a key, a keyed run replaces a queued holder, some runs are duplicates and others new,
a key taken since its snapshot) goes the full way, the script's (`submit_script.keyed`): one
advisory lock per key in key order, the holders read after them, the domain's `plan`, the
replaced holders, the new runs stored by `enqueue`'s own statements (its admission ceilings
included) and the keys taken, in one pipelined transaction; a refusal, a `DuplicateRun` or any
error rolls the whole batch back.
"""

from __future__ import annotations

from collections.abc import Sequence

from tidegate.domain.model import NewRun
from tidegate.domain.unique import Admission
from tidegate.storage import port
from tidegate.storage.postgres import script_runner, submit_script
from tidegate.storage.postgres.database import Aggregate
from tidegate.storage.postgres.free_submit import free_answers, free_steps, free_version
from tidegate.storage.postgres.pipeline import transaction
from tidegate.storage.shared import wakes


class Unique(Aggregate, port.UniqueVerbs):
    """The keyed submit of the storage port."""

    def enqueue_unique(self, runs: Sequence[NewRun]) -> list[Admission]:
        wakes.sent_in_statement()  # by the statement that stores the runs, when it stores any
        with self._connection() as connection:
            steps = free_steps(runs, free_version(self._db, runs, connection))
            if steps is not None:
                answers = free_answers(runs, script_runner.run_batch(connection, self._q, steps)[-1])
                if answers is not None:
                    return answers
                self._db.ceilings.forget()  # perhaps the rules moved: read again before the next one
            with transaction(connection):
                return script_runner.run(connection, self._db.queries, submit_script.keyed(runs))
