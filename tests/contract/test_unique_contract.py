"""Once per key through the Store port (`enqueue_unique`): the key's holder, its states, races.

Same expectations on both adapters. The race is real: separate processes, each with its own
store and connections, released together, submit the same key; exactly one run is stored.
"""

from __future__ import annotations

import multiprocessing
from dataclasses import replace

import pytest

from tidegate import DuplicateRun, RunStatus
from tidegate.bootstrap import open_store
from tidegate.domain.keys import ACTIVE_STATES, RunKey

from .conftest import QUEUE, claim, new_run, start

SUBMITTERS = 8


def keyed(key: str = "k", *, period: float | None = None, on_conflict: str = "existing", **fields):
    return replace(new_run(**fields), unique=RunKey(key, ACTIVE_STATES, period, on_conflict))


def test_a_key_is_taken_once_and_its_holder_answers_the_next_submit(store):
    first = keyed(args={"n": 1})
    [taken] = store.enqueue_unique([first])
    assert (taken.run_id, taken.duplicate) == (first.id, False)
    [met] = store.enqueue_unique([keyed(args={"n": 2})])
    assert (met.run_id, met.duplicate, met.replaced) == (first.id, True, False)
    assert [run.id for run in store.page_runs()] == [first.id]


def test_a_run_leaving_its_states_frees_its_key_and_failed_or_canceled_never_hold(store):
    first = keyed()
    store.enqueue_unique([first])
    store.cancel_run(first.id)
    second = keyed()
    assert store.enqueue_unique([second])[0].run_id == second.id
    [claimed] = claim(store, "w1")  # running still holds it
    assert claimed.id == second.id
    assert store.enqueue_unique([keyed()])[0].run_id == second.id


def test_replace_gives_a_queued_holder_the_new_args_and_raise_stores_nothing(store):
    first = keyed(args={"v": 1})
    store.enqueue_unique([first])
    [answer] = store.enqueue_unique([keyed(args={"v": 2}, on_conflict="replace")])
    assert answer.replaced and store.get_run(first.id).args == {"v": 2}
    with pytest.raises(DuplicateRun) as raised:
        store.enqueue_unique([new_run(), keyed(on_conflict="raise")])
    assert raised.value.run_id == first.id
    assert len(store.page_runs()) == 1  # the batch's other run is not stored either


def test_a_started_holder_is_not_replaced(store):
    first = keyed(args={"v": 1})
    store.enqueue_unique([first])
    [claimed] = claim(store, "w1")
    start(store, "w1", [(claimed.id, claimed.attempt)])
    [answer] = store.enqueue_unique([keyed(args={"v": 2}, on_conflict="replace")])
    assert (answer.run_id, answer.duplicate, answer.replaced) == (first.id, True, False)
    assert store.get_run(first.id).args == {"v": 1} and store.get_run(first.id).status is RunStatus.RUNNING


def _submit_once(database_url: str, barrier, answers) -> None:
    store = open_store(database_url)
    try:
        run = keyed("race")
        barrier.wait(timeout=60)
        [answer] = store.enqueue_unique([run])
        answers.put((run.id, answer.run_id, answer.duplicate))
    finally:
        store.close()


def test_concurrent_submitters_of_one_key_store_one_run(store, database_url):
    store.page_runs()  # migrated before the race: the submitters only submit
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(SUBMITTERS)
    answers = context.Queue()
    processes = [context.Process(target=_submit_once, args=(database_url, barrier, answers)) for _ in range(SUBMITTERS)]
    for process in processes:
        process.start()
    results = [answers.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    stored = store.page_runs()
    assert len(stored) == 1
    assert {standing for _, standing, _ in results} == {stored[0].id}
    assert sorted(duplicate for _, _, duplicate in results) == [False] + [True] * (SUBMITTERS - 1)
    assert stored[0].queue == QUEUE


NEW_KEY_ONLY = "ON CONFLICT (key) DO NOTHING"


@pytest.mark.parametrize("removed", [False, True], ids=["intact", "removed"])
def test_the_insert_that_takes_a_new_key_never_takes_one_with_a_row(store, backend, removed, monkeypatch):
    """SQLite's single keyed submit takes a key in its insert (`unique_take_new`, a mutation check):
    a key with a row is left to the general way, which reads its holder. Removed (the insert
    overwrites the row), a second submit of a held key stores a second run beside its holder."""
    if removed and backend != "sqlite":
        pytest.skip("PostgreSQL has no such insert: nothing to take out")
    if removed:
        queries = store._db.queries
        assert NEW_KEY_ONLY in queries["unique_take_new"]
        overwrite = "ON CONFLICT (key) DO UPDATE SET run_id = excluded.run_id"
        monkeypatch.setitem(queries, "unique_take_new", queries["unique_take_new"].replace(NEW_KEY_ONLY, overwrite))
    first, second = keyed(args={"n": 1}), keyed(args={"n": 2})
    store.enqueue_unique([first])
    [met] = store.enqueue_unique([second])
    stored = {run.id for run in store.page_runs()}
    if removed:
        assert (met.run_id, met.duplicate, stored) == (second.id, False, {first.id, second.id})
    else:
        assert (met.run_id, met.duplicate, stored) == (first.id, True, {first.id})
