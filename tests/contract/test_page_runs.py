"""`Store.page_runs`: the keyset read behind `GET /api/v1/runs`, alike on both adapters.

Newest first by id; `before` continues after the last id of a page; every
filter narrows (tags: each key=value pair must be carried, other tags are
ignored); a tag value is compared as text, never as JSON.
"""

from __future__ import annotations

from tidegate import App, RunStatus


def test_pages_filters_and_tags(app: App) -> None:
    app.queue("other")

    @app.task(name="first")
    def first(n: int) -> int:
        return n

    @app.task(name="second", queue="other")
    def second(n: int) -> int:
        return n

    ids = []
    for n in range(6):
        task = first if n % 2 else second
        ids.append(task.options(tags={"tenant": f"t{n % 3}", "n": str(n)}).submit(n=n).id)
    app.store.cancel_run(ids[0])
    store = app.store
    newest_first = ids[::-1]

    assert [run.id for run in store.page_runs(limit=100)] == newest_first
    assert [run.id for run in store.page_runs(limit=2)] == newest_first[:2]
    assert [run.id for run in store.page_runs(before=newest_first[1], limit=3)] == newest_first[2:5]
    assert store.page_runs(before=ids[0]) == []
    assert [run.id for run in store.page_runs(task="first")] == [ids[5], ids[3], ids[1]]
    assert [run.id for run in store.page_runs(queue="other")] == [ids[4], ids[2], ids[0]]
    assert [run.id for run in store.page_runs(status=RunStatus.CANCELED)] == [ids[0]]
    assert [run.id for run in store.page_runs(tags={"tenant": "t1"})] == [ids[4], ids[1]]
    assert [run.id for run in store.page_runs(tags={"tenant": "t1", "n": "4"})] == [ids[4]]
    assert store.page_runs(tags={"tenant": "t1", "n": "3"}) == []
    assert store.page_runs(tags={"n": "04"}) == []  # text, not a number
    assert store.page_runs(tags={"missing": "x"}) == []
    narrowed = store.page_runs(task="second", status=RunStatus.QUEUED, tags={"tenant": "t2"})
    assert [run.id for run in narrowed] == [ids[2]]
    shown = store.page_runs(limit=1)[0]
    assert (shown.args, shown.tags, shown.status) == ({"n": 5}, {"tenant": "t2", "n": "5"}, RunStatus.QUEUED)
