"""`Store.page_runs`: the keyset read behind `GET /api/v1/runs`, alike on both adapters.

Newest first by id; `before` continues after the last id of a page; every
filter narrows (tags: each key=value pair must be carried, other tags are
ignored); a tag value is compared as text, never as JSON.
"""

from __future__ import annotations

from tidegate import RunStatus

from .conftest import enqueue_one


def _ids(runs) -> list[str]:
    return [run.id for run in runs]


def test_page_runs_is_newest_first_and_continues_after_before(store):
    ids = [enqueue_one(store) for _ in range(5)]
    newest_first = ids[::-1]
    assert _ids(store.page_runs()) == newest_first
    assert _ids(store.page_runs(limit=2)) == newest_first[:2]
    assert _ids(store.page_runs(before=newest_first[1], limit=2)) == newest_first[2:4]
    assert store.page_runs(before=ids[0]) == []


def test_page_runs_filters_by_status_queue_and_task(store):
    first = enqueue_one(store, task="t.first")
    other = enqueue_one(store, "other", task="t.second")
    canceled = enqueue_one(store, task="t.second")
    store.cancel_run(canceled)
    assert _ids(store.page_runs(task="t.second")) == [canceled, other]
    assert _ids(store.page_runs(queue="other")) == [other]
    assert _ids(store.page_runs(status=RunStatus.CANCELED)) == [canceled]
    assert _ids(store.page_runs(status=RunStatus.QUEUED, task="t.first")) == [first]
    assert store.page_runs(task="t.none") == []


def test_page_runs_needs_every_tag_asked_for_as_text(store):
    acme = enqueue_one(store, tags={"tenant": "acme", "n": "4"})
    other = enqueue_one(store, tags={"tenant": "acme", "n": "5", "env": "prod"})
    enqueue_one(store, tags={"tenant": "globex", "n": "4"})
    assert _ids(store.page_runs(tags={"tenant": "acme"})) == [other, acme]
    assert _ids(store.page_runs(tags={"tenant": "acme", "n": "4"})) == [acme]
    assert store.page_runs(tags={"tenant": "acme", "n": "6"}) == []
    assert store.page_runs(tags={"n": "04"}) == []  # text, not a number
    assert store.page_runs(tags={"missing": "x"}) == []
    shown = store.page_runs(limit=1)[0]
    assert shown.tags == {"tenant": "globex", "n": "4"} and shown.status is RunStatus.QUEUED
