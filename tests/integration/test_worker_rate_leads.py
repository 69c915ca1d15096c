"""A run taken ahead under a rate starts within its lead, or only once its charge was recharged.

The claim charges such a run with a lead counted from the end of it
(domain/rates.py, `charged`), and the worker starts it within that lead of the
claim's sending, or names it to its next cycle to be charged again
(`CycleRequest.recharge`). Here the lead is cut to 2 ms, so runs waiting behind
20 ms ones on 2 slots lapse: every run still completes, none starts past the
lead it holds, and recharges happen. Taken out (a lapsed run starts anyway), runs
start past their lead. Both adapters.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tidegate import Rate, RunStatus
from tidegate.domain import rates
from tidegate.domain.model import ClaimedRun
from tidegate.worker import dispatch
from tidegate.worker.dispatch import Dispatcher

QUEUE = "leads"
MUTATION = pytest.mark.parametrize("removed", [False, True], ids=["intact", "removed"])


@MUTATION
def test_a_run_taken_ahead_under_a_rate_never_starts_past_its_lead(app: Any, monkeypatch: Any, removed: bool) -> None:
    monkeypatch.setattr(rates, "LEAD_CAP_NS", 2_000_000)
    if removed:
        monkeypatch.setattr(dispatch, "lead_ran_out", lambda *_: False)
    late: list[str] = []
    recharged = [0]
    real_start, real_recharged = Dispatcher._start, Dispatcher.recharged

    def start(self: Dispatcher, run: ClaimedRun, sent: float) -> None:
        if run.lead is not None and self._clock.monotonic() > sent + run.lead:
            late.append(run.id)
        real_start(self, run, sent)

    def count_recharged(self: Dispatcher, asked: Any, leads: Any, sent: float) -> None:
        recharged[0] += len(leads)
        real_recharged(self, asked, leads, sent)

    monkeypatch.setattr(Dispatcher, "_start", start)
    monkeypatch.setattr(Dispatcher, "recharged", count_recharged)
    app.queue(QUEUE, rate=Rate(limit=1_000_000, per="1s"))

    @app.task(name="leads.short", queue=QUEUE)
    async def short(i: int) -> None:
        await asyncio.sleep(0.02)

    short.submit_many([{"i": i} for i in range(24)])
    app.worker(queues=[QUEUE], max_workers=2, drain=True).run()
    assert app.store.run_counts()[(QUEUE, RunStatus.COMPLETED)] == 24
    assert bool(late) is removed, late
    if not removed:
        assert recharged[0] > 0
