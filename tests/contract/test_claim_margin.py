"""The window's margin on both dialects: read while the last claim of the same queues held a run
back (or left too little room), skipped otherwise (`claiming.room_after`, `claiming.reads_margin`).

A queue only a rate limits leaves a claim that took all it read no scope to run out of, so the
next claim reads its claim limit, not twice it: a rate that never binds costs no wider read
(issue 25). Once the rate refuses a run, the claim after reads the margin again and records why
the runs behind wait. Mutation: `room_after` made to forget what a claim held back; the runs past
the claim limit then never get their block reasons.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.claim_windows import record_windows
from tidegate import App, Rate
from tidegate.domain.claim_plan import MIN_MARGIN
from tidegate.domain.integers import STORED_INT_MAX
from tidegate.domain.model import CycleRequest
from tidegate.storage.shared import claiming

LEASE = 60.0
CLAIM = 2


@pytest.mark.parametrize("removed", [False, True], ids=["intact", "removed"])
def test_a_rate_only_queue_reads_its_margin_only_after_the_rate_held_a_run_back(database_url, monkeypatch, removed):
    """Rate(4 per hour, burst 4), 14 runs, claims of 2: the first reads its margin (2 + 8: nothing
    known yet) and takes 2; the second reads 2 and takes 2 (the tokens are spent); the third reads
    2 and the rate refuses both; the fourth reads the margin again, and every queued run says why."""
    if removed:
        monkeypatch.setattr(claiming, "room_after", lambda *_: STORED_INT_MAX)  # the mutation
    with App(database_url) as app:
        app.queue("r", rate=Rate(limit=4, per="1h", burst=4))
        work = app.task(name="margin.rated", queue="r")(lambda n: n)
        for n in range(14):
            work.submit(n=n)  # one by one: a strict claim order
        app.store.rules()
        sizes = record_windows(monkeypatch)

        def claim() -> tuple[int, set[int]]:
            sizes.clear()
            claimed: Any = app.store.cycle(CycleRequest("w1", ["r"], [], [], CLAIM, LEASE)).claimed
            return len(claimed), set(sizes)  # PostgreSQL sizes its first read twice (sent ahead, then asked)

        wide = CLAIM + MIN_MARGIN
        assert claim() == (2, {wide})
        assert claim() == (2, {CLAIM})
        assert claim() == (0, {CLAIM})  # read 2, both held back by the rate
        assert claim() == (0, {CLAIM if removed else wide})
        explained = [run for run in app.store.list_queued("r") if run.block_reason]
        assert len(explained) == (CLAIM if removed else 10), explained
