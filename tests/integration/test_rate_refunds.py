"""Rate charges given back: a claim undone before its run starts (a hand-back) returns its tokens;
one that started keeps them, and a retry after a failure is a new start that pays again.

On both backends: each adapter reads, gives back and writes the windows' states in
its own SQL, in the hand-back's transaction (storage/shared/rate_charges.py).
"""

from __future__ import annotations

from tidegate import App, Partition, Rate
from tidegate.domain.clock import ShiftedClock
from tidegate.domain.model import CycleRequest, Outcome, OutcomeKind
from tidegate.domain.rates import LEAD_CAP_NS, NS


def _claim(app: App, limit: int = 10, worker: str = "w1") -> list[tuple[str, int]]:
    return [run.fence for run in app.store.cycle(CycleRequest(worker, ["api"], [], [], limit, 60)).claimed]


def _rated(app: App, **partition: object) -> object:
    app.queue("api", rate=Rate(limit=2, per="1m", burst=1), **partition)  # one start every 30 s
    return app.task(name="call", queue="api", max_attempts=3)(lambda key="a": None)


def test_a_hand_back_before_the_start_gives_the_tokens_back(app: App, clock: ShiftedClock) -> None:
    call = _rated(app)
    first, second = call.submit().id, call.submit().id  # type: ignore[attr-defined]
    [fence] = _claim(app)
    assert fence[0] == first and _claim(app) == []  # the rate holds the second back
    assert app.store.hand_back("w1", [fence]) == [first]
    # The token came back: the handed-back run (it keeps its place) starts again at once, and
    # the second still waits for the next token, 30 s on.
    assert [run_id for run_id, _ in _claim(app)] == [first]
    assert _claim(app) == []
    clock.advance(31)
    assert [run_id for run_id, _ in _claim(app)] == [second]


def test_a_hand_back_after_the_start_keeps_the_charge(app: App, clock: ShiftedClock) -> None:
    call = _rated(app)
    first = call.submit().id  # type: ignore[attr-defined]
    [fence] = _claim(app)
    app.store.cycle(CycleRequest("w1", ["api"], [fence], [], 0, 60))  # the worker reports the start
    assert app.store.hand_back("w1", [fence]) == [first]
    assert _claim(app) == []  # it ran: its token is spent, the rerun waits for the next one
    clock.advance(31)
    assert [run_id for run_id, _ in _claim(app)] == [first]


def test_a_retry_after_a_failure_pays_again(app: App, clock: ShiftedClock) -> None:
    call = _rated(app)
    run_id = call.submit().id  # type: ignore[attr-defined]
    [fence] = _claim(app)
    failed = Outcome(run_id, fence[1], OutcomeKind.FAILED, error="boom", retry_delay=0.0, has_parent=False)
    assert (
        app.store.cycle(CycleRequest("w1", ["api"], [fence], [failed], 10, 60)).claimed == []
    )  # due, but no token yet
    clock.advance(31)
    [(again, attempt)] = _claim(app)
    assert (again, attempt) == (run_id, 2)


def test_hand_backs_of_several_runs_and_partitions_give_each_window_its_tokens(app: App, clock: ShiftedClock) -> None:
    call = _rated(app, rate_partition=Partition(by_args=["key"]))
    runs = {key: [call.submit(key=key).id for _ in range(2)] for key in ("a", "b")}  # type: ignore[attr-defined]
    fences = _claim(app)
    assert sorted(run_id for run_id, _ in fences) == sorted([runs["a"][0], runs["b"][0]])
    assert _claim(app) == []
    assert sorted(app.store.hand_back("w1", fences)) == sorted(run_id for run_id, _ in fences)
    again = _claim(app)
    assert sorted(run_id for run_id, _ in again) == sorted([runs["a"][0], runs["b"][0]])
    assert _claim(app) == []  # each key's second run still waits: no window got more than one back
    stored = app.store.rate_states().states
    assert set(stored) == {("rate:api/key=a", 60 * 10**9), ("rate:api/key=b", 60 * 10**9)}


def test_a_hand_back_after_other_charges_gives_back_only_its_unspent_time(app: App, clock: ShiftedClock) -> None:
    """Charged behind another start, a handed-back claim returns its own token, not the other's;
    a queue's rate keeps the tenth of a second past the hand-back a run taken ahead may stand on
    (`rate_charger.lead_kept`), so the token is back that much later."""
    app.queue("api", rate=Rate(limit=4, per="1m", burst=2))  # burst 2, then one start every 20 s
    call = app.task(name="call", queue="api")(lambda: None)
    ids = [call.submit().id for _ in range(4)]
    first, second = _claim(app, 1), _claim(app, 1)
    assert [f[0] for f in first + second] == ids[:2] and _claim(app) == []
    assert app.store.hand_back("w1", first) == [ids[0]]  # the earlier charge, with a later one after it
    assert _claim(app) == []  # the furthest lead past the hand-back stays spent ...
    clock.advance(LEAD_CAP_NS / NS)
    assert [run_id for run_id, _ in _claim(app)] == [ids[0]]  # ... then its token is back ...
    assert _claim(app) == []  # ... and only its own
