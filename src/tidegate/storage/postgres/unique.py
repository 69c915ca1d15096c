"""PostgreSQL: a keyed submit (once per key, domain/unique.py) in one transaction.

The statements and decisions are the script's (`submit_script.keyed`): one advisory lock per
key in key order, the holders read after them, the domain's `plan`, the replaced holders, the
new runs stored by `enqueue`'s own statements (its admission ceilings included) and the keys
taken. Here they run in one pipelined transaction of the store's pool; a refusal, a
`DuplicateRun` or any error rolls the whole batch back. The plain submit (`runs.py`) is
untouched: only a batch with a key comes here.
"""

from __future__ import annotations

from collections.abc import Sequence

from tidegate.domain.model import NewRun
from tidegate.domain.unique import Admission
from tidegate.storage import port
from tidegate.storage.postgres import script_runner, submit_script
from tidegate.storage.postgres.database import Aggregate
from tidegate.storage.postgres.pipeline import transaction
from tidegate.storage.shared import wakes


class Unique(Aggregate, port.UniqueVerbs):
    """The keyed submit of the storage port."""

    def enqueue_unique(self, runs: Sequence[NewRun]) -> list[Admission]:
        wakes.sent_in_statement()  # by the script's `enqueue` statement, when runs are stored
        with self._connection() as connection, transaction(connection):
            return script_runner.run(connection, self._db.queries, submit_script.keyed(runs))
