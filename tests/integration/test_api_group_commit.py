"""Group commit: concurrent single submits share a transaction, and each still gets its own answer.

A burst of POST /runs on one event loop is stored in groups (api/group_commit.py):
a request that fails its checks gets its 422 alone, and a group the store
refuses (a ceiling) is stored run by run, so exactly `max_active` runs are
accepted, every other one is a 429, and the store holds only the 201s.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any

import httpx

from tests.apps.api import store_size
from tidegate import App
from tidegate.api.refusals import Refusals
from tidegate.domain.model import NewRun

CEILING = 10
GOOD, BAD = 25, 5


async def _burst(api: Any, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return await asyncio.gather(*(client.post("/api/v1/runs", json=body) for body in bodies))


def test_a_burst_is_stored_in_groups_and_each_submit_gets_its_own_exact_answer(app: App, database_url: str) -> None:
    app.queue("grouped", max_active=CEILING)

    @app.task(name="grouped", queue="grouped")
    def grouped(n: int) -> None:
        return None

    sizes: list[int] = []
    enqueue = app.enqueue

    def recorded(runs: Sequence[NewRun]) -> Any:
        sizes.append(len(runs))
        return enqueue(runs)

    app.enqueue = recorded  # type: ignore[method-assign]
    api = app.asgi()
    api.state.refusals = Refusals(staleness=0)  # every answer from the store: no repeated refusal
    bodies = [{"task": "grouped", "args": {"n": n}} for n in range(GOOD)]
    bodies[3:3] = [{"task": "grouped", "args": {"nope": n}} for n in range(BAD)]  # not the task's parameters
    app.store.migrate()
    before = store_size(database_url)

    answers = asyncio.run(_burst(api, bodies))

    assert Counter(answer.status_code for answer in answers) == {201: CEILING, 429: GOOD - CEILING, 422: BAD}
    assert all(answer.json()["field"] == "args" for answer in answers if answer.status_code == 422)
    accepted = {answer.json()["id"] for answer in answers if answer.status_code == 201}
    assert {run.id for run in app.store.page_runs(queue="grouped")} == accepted
    assert store_size(database_url)[0] == before[0] + CEILING
    assert max(sizes) > 1, f"the burst was stored one run at a time: {sizes}"
