"""The one-statement submit of a batch no admission ceiling applies to keeps every ceiling set live
(a mutation check).

On PostgreSQL a submit that meets no ceiling under the rules version its store last read the
ceilings at is one statement, `enqueue_free` (no fence, no ceiling lock, no count;
storage/postgres/runs.py). A ceiling can be set meanwhile by anyone: two things keep it exact,
and each is taken out here to see the violation it prevents.

- The statement's own check of the rules version: without it, a store that read "no ceiling"
  submits past a ceiling set since.
- The version read FOR SHARE: without it, the check reads the statement's snapshot, so a
  ceiling's change that commits while the submit is in flight (before or after that read) is
  missed, and the submit stores a run past the new ceiling.

SQLite has no such path (a submit counts under its one writer's lock): it runs the first
contract intact; the races need a statement to stall in, PostgreSQL's.

The statement is the body of the function tidegate_enqueue_free (migration 0027), which
`enqueue_free` calls: a mutation is a copy of that function under another name with its body
changed, called by the mutated store in place of the original (`_variant`).
"""

from __future__ import annotations

from contextlib import nullcontext

import pytest

from tests import races
from tidegate import AdmissionRejected, App, RunQueueConfig
from tidegate.bootstrap import open_store
from tidegate.domain.limits import QueueConfig

MUTATION = pytest.mark.parametrize("removed", [False, True], ids=["intact", "removed"])
QUEUE = "qf"
GUARD = "value = p_known"
FUNCTION = "tidegate_enqueue_free"


def _variant(store, suffix: str, edit) -> str:  # type: ignore[no-untyped-def]
    """`enqueue_free` calling a copy of its function named FUNCTION_suffix, whose definition is
    `edit(definition)`: created in the store's schema, and called only by whoever is given the text."""
    call = store._queries["enqueue_free"]
    assert f"SELECT {FUNCTION}(" in call
    with store._connection() as connection:
        (definition,) = connection.execute(f"SELECT pg_get_functiondef('{FUNCTION}'::regproc)").fetchone()
        named = definition.replace(f".{FUNCTION}(", f".{FUNCTION}_{suffix}(", 1)
        assert named != definition
        changed = edit(named)
        assert changed != named, "the mutation changed nothing"
        connection.execute(changed.replace("%", "%%"))
    return call.replace(f"SELECT {FUNCTION}(", f"SELECT {FUNCTION}_{suffix}(", 1)


def _only_on_postgres(backend: str, removed: bool) -> None:
    if removed and backend != "postgres":
        pytest.skip("SQLite has no one-statement submit: nothing to take out")


def _set_ceiling(database_url: str, where: str) -> None:
    """max_active 1, set by another store (another process would do the same)."""
    other = open_store(database_url)
    try:
        if where == "global":
            other.register_limits(RunQueueConfig(max_active=1), [], [])
        else:
            other.register_limits(None, [QueueConfig(QUEUE, max_active=1)], [])
    finally:
        other.close()


@MUTATION
@pytest.mark.parametrize("where", ["global", "queue"])
def test_a_ceiling_set_after_a_submit_read_none_refuses_the_next_submit(database_url, backend, removed, where):
    """The first submit reads the ceilings (none) and stores one run; another store then sets
    max_active 1. The next submit must be refused; without the version check it stores a second."""
    _only_on_postgres(backend, removed)
    with App(database_url) as app:
        work = app.task(name="free.work", queue=QUEUE)(lambda n: n)
        work.submit(n=0)
        work.submit(n=1)  # the one-statement way already: the ceilings were read by the first
        if removed:
            unguarded = _variant(app.store, "unguarded", lambda text: text.replace(GUARD, "p_known IS NOT NULL"))
            app.store._queries = {**app.store._queries, "enqueue_free": unguarded}
        _set_ceiling(database_url, where)
        with pytest.raises(AdmissionRejected) if not removed else nullcontext():  # removed: stored
            work.submit(n=2)
        assert sum(app.store.status_counts().values()) == (3 if removed else 2)


LOCKING_READ = "WHERE name = 'rules_version'\n                         FOR SHARE)"
UNLOCKED_READ = "WHERE name = 'rules_version')"


def _stalled(text: str, stall: str, where: str) -> str:
    """The function's definition, its statement stalled by `stall` either before it reads the rules
    version (its snapshot is taken as the statement starts, before the stall) or just after
    (holding what that read took)."""
    head = "WITH current_rules AS MATERIALIZED (\n"
    tail = "AS same\n    ), new AS ("
    uses = "WHERE (SELECT same FROM current_rules)\n"
    assert head in text and tail in text and uses in text
    if where == "before_read":
        text = text.replace(head, f"WITH stall AS MATERIALIZED ({stall}), current_rules AS MATERIALIZED (\n", 1)
        return text.replace(tail, "AS same FROM stall\n    ), new AS (", 1)
    after = f"AS same\n    ), stall AS MATERIALIZED (SELECT same, ({stall}) FROM current_rules\n    ), new AS ("
    text = text.replace(tail, after, 1)
    return text.replace(uses, "WHERE (SELECT same FROM stall)\n", 1)


@MUTATION
@pytest.mark.parametrize("where", ["before_read", "after_read"])
def test_a_ceiling_change_and_a_one_statement_submit_in_flight_are_ordered(database_url, backend, removed, where):
    """One run stored; a submit (the one-statement way) stalls inside `enqueue_free`, and meanwhile
    max_active 1 is set. Either order is exact, never the change first and the run stored past it:

    - stalled before it reads the version, the submit may let the change commit first, but then
      its locking read sees the new version, and the submit, made again the full way, is refused;
    - stalled after it, the change waits for the submit, which commits first under the rules it read.

    Without FOR SHARE (the read of the statement's snapshot, no lock held) the change commits
    first in both, and the submit then stores a run past it."""
    if backend != "postgres":
        pytest.skip("the race needs a statement to stall in: PostgreSQL's")
    with App(database_url) as app:
        work = app.task(name="free.work", queue=QUEUE)(lambda n: n)
        work.submit(n=0)  # reads the ceilings: none
        submitter = races.Party("submitter", lambda: work.submit(n=1))
        # The same store (its cache of the ceilings is the submit's own, untouched by the change): the
        # race watches its connections.
        changer = races.Party("changer", lambda: app.store.register_limits(RunQueueConfig(max_active=1), [], []))
        race = races.Race(database_url)
        try:
            races.track(app.store)
            with race.stall() as stall:

                def edit(text: str) -> str:
                    if removed:
                        assert LOCKING_READ in text
                        text = text.replace(LOCKING_READ, UNLOCKED_READ)
                    return _stalled(text, stall, where)

                races.stall_query(app.store, submitter, "enqueue_free", _variant(app.store, "stalled", edit))
                race.run(submitter, changer, first_parked=race.blocked, release=race.release_stall)
        finally:
            race.close()
        stored = sum(app.store.status_counts().values())
        late = race.second_ended_first and stored > 1
        refused = isinstance(submitter.error, AdmissionRejected)
        assert changer.error is None and (submitter.error is None or refused), (submitter.error, changer.error)
        assert late is removed, (race.second_ended_first, stored, submitter.error)
        assert app.store.rules().run_queue.max_active == 1
        if not removed:
            # before the read the change may go first (then the submit is refused); after it, never
            assert (race.second_ended_first, stored, refused) in (
                [(True, 1, True), (False, 2, False)] if where == "before_read" else [(False, 2, False)]
            )
