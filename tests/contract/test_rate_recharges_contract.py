"""Runs taken ahead under a rate whose lead ran out, charged again (`CycleRequest.recharge`), both backends.

A run a claim takes ahead of the worker's free slots under its queue's rate is
charged with a lead it must start within (`ClaimedRun.lead`). One still waiting
when the lead runs out is named by the worker's next cycle: a run the worker can
start at once (`recharge_at_once`) is charged as a claim for a free slot charges; one
that must wait for a slot gets a fresh lead while the rate's windows are roomy;
the rest wait on the worker, and the cycle says when the rate allows them
(docs/rates.md).
"""

from __future__ import annotations

from tidegate import App, Rate
from tidegate.domain.model import CycleRequest, CycleResult

from .conftest import LEASE

QUEUE = "recharge.rated"


def _cycle(app: App, limit: int, ahead: int, recharge=(), at_once: int = 0, worker: str = "w1") -> CycleResult:
    return app.store.cycle(CycleRequest(worker, [QUEUE], [], [], limit, LEASE, ahead, recharge, at_once))


def _app(database_url: str, rate: Rate) -> App:
    app = App(database_url)
    app.queue(QUEUE, rate=rate)
    work = app.task(name=QUEUE, queue=QUEUE)(lambda n: n)
    work.submit_many([{"n": n} for n in range(12)])
    return app


def _tats(app: App) -> list[int]:
    return sorted(app.store.rate_states().states.values())


def test_a_run_whose_lead_ran_out_is_charged_again_with_a_fresh_lead(database_url):
    with _app(database_url, Rate(limit=1_000_000, per="1s")) as app:
        assert len(_cycle(app, 1, 0).claimed) == 1  # rules cached
        ahead = [run for run in _cycle(app, 4, 3).claimed if run.lead is not None]
        assert len(ahead) == 3
        before = _tats(app)
        result = _cycle(app, 0, 0, [run.fence for run in ahead], at_once=1)
        assert set(result.recharged) == {run.id for run in ahead}
        first, *waiting = (result.recharged[run.id] for run in ahead)
        assert first is None  # a slot is free for it: it starts at once
        assert all(lead is not None and lead > 0 for lead in waiting)
        assert _tats(app) > before  # charged again: the window's state moved on


def test_past_half_its_burst_a_recharge_charges_only_what_can_start_at_once(database_url):
    """Rate(60, '1m', burst=10): 4 claimed (3 ahead), 5 more for free slots: 9 of the burst used.
    Recharging the 3 with 2 free slots: the first is charged to start at once (the tenth token), the
    second is refused, and the third, with no slot, gets no fresh lead (past half the burst): they
    wait, and the cycle says when the rate allows them."""
    with _app(database_url, Rate(limit=60, per="1m", burst=10)) as app:
        ahead = [run for run in _cycle(app, 4, 3).claimed if run.lead is not None]
        assert len(ahead) == 3
        assert len(_cycle(app, 5, 0).claimed) == 5
        result = _cycle(app, 0, 0, [run.fence for run in ahead], at_once=2)
        assert result.recharged == {ahead[0].id: None}
        assert result.next_allowed_in is not None and result.next_allowed_in > 0


def test_only_the_workers_own_unstarted_runs_are_recharged(database_url):
    with _app(database_url, Rate(limit=1_000_000, per="1s")) as app:
        assert len(_cycle(app, 1, 0).claimed) == 1
        first, second = [run for run in _cycle(app, 3, 2).claimed if run.lead is not None]
        assert _cycle(app, 0, 0, [first.fence], worker="w2").recharged == {}  # another worker's
        app.store.cycle(CycleRequest("w1", [QUEUE], [second.fence], [], 0, LEASE))  # started
        assert _cycle(app, 0, 0, [first.fence, second.fence]).recharged.keys() == {first.id}
