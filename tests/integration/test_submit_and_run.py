"""Submit -> worker -> result, on both adapters; and bad submits that store nothing."""

import asyncio

import pytest

import tidegate
from tidegate import App, Context, InvalidArgument, RunStatus, UnknownTask

from .conftest import event_types


def test_sync_task_runs_and_returns_its_result(app, start_worker):
    @app.task(name="t.add")
    def add(a: int, b: int) -> int:
        return a + b

    start_worker()
    handle = add.submit(a=2, b=40)
    assert handle.wait(timeout=30) == 42
    record = handle.info()
    assert record.status is RunStatus.COMPLETED
    assert record.result == 42
    assert record.attempt == 1
    assert record.args == {"a": 2, "b": 40}
    assert record.finished_at is not None and record.started_at is not None
    assert record.worker_id is None and record.lease_expires_at is None  # released
    assert event_types(app, handle.id) == ["RunQueued", "RunDequeued", "RunStarted", "RunCompleted"]


def test_async_task_runs_on_the_loop_and_returns_structured_json(app, start_worker):
    @app.task(name="t.async_echo")
    async def echo(payload: dict) -> dict:
        await asyncio.sleep(0.01)
        return {"echo": payload, "n": [1, 2.5, None, True]}

    start_worker()
    handle = echo.submit(payload={"k": ["v", 1]})
    assert handle.wait(timeout=30) == {"echo": {"k": ["v", 1]}, "n": [1, 2.5, None, True]}
    assert handle.status() is RunStatus.COMPLETED


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_context_is_injected_with_run_id_and_attempt(app, start_worker, kind):
    if kind == "sync":

        @app.task(name="t.whoami", queue="ctxq")
        def whoami(ctx: Context, x: int) -> dict:
            return {"run_id": ctx.run_id, "attempt": ctx.attempt, "task": ctx.task, "queue": ctx.queue, "x": x}

    else:

        @app.task(name="t.whoami", queue="ctxq")
        async def whoami(x: int, context: tidegate.Context) -> dict:
            return {
                "run_id": context.run_id,
                "attempt": context.attempt,
                "task": context.task,
                "queue": context.queue,
                "x": x,
            }

    start_worker()
    handles = [whoami.submit(x=i) for i in range(3)]
    for i, handle in enumerate(handles):
        assert handle.wait(timeout=30) == {
            "run_id": handle.id,
            "attempt": 1,
            "task": "t.whoami",
            "queue": "ctxq",
            "x": i,
        }
    assert len({h.id for h in handles}) == 3


def test_context_parameter_is_not_an_argument(app):
    @app.task(name="t.ctx_only")
    def ctx_only(ctx: Context) -> int:
        return 1

    with pytest.raises(InvalidArgument, match="ctx"):
        ctx_only.submit(ctx="not allowed")
    assert app.store.page_runs() == []


def test_submit_by_name_from_an_app_without_the_code(app, start_worker, database_url):
    @app.task(name="t.mul", queue="math", max_attempts=2)
    def mul(a: int, b: int) -> int:
        return a * b

    start_worker()  # registers the task's defaults in the store
    with App(database_url) as caller:
        assert caller.tasks == {}
        handle = caller.submit("t.mul", args={"a": 6, "b": 7})
        assert handle.wait(timeout=30) == 42
        record = handle.info()
        assert record.queue == "math"  # the defaults came from the store
        assert record.max_attempts == 2
        with pytest.raises(UnknownTask, match=r"t\.nope"):
            caller.submit("t.nope", args={})
        with pytest.raises(InvalidArgument, match="'a'"):
            caller.submit("t.mul", args={"a": {1, 2}, "b": 1})
        assert [run.id for run in caller.store.page_runs()] == [handle.id]


def test_unknown_task_name(app):
    with pytest.raises(UnknownTask, match=r"no\.such\.task"):
        app.submit("no.such.task", args={"a": 1})
    assert app.store.page_runs() == []


def _assert_nothing_stored(app):
    assert app.store.page_runs() == []
    assert set(app.store.status_counts().values()) == {0}


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ({"a": object(), "b": 1}, "'a'"),
        ({"a": 1, "b": {"deep": [1, {2, 3}]}}, "'b'"),
        ({"a": float("nan"), "b": 1}, "'a'"),
        ({"a": b"raw", "b": 1}, "'a'"),
        ({"a": 1}, "'b'"),  # missing
        ({"a": 1, "b": 2, "c": 3}, "'c'"),  # unknown
    ],
    ids=["object", "nested-set", "nan", "bytes", "missing", "unknown"],
)
def test_invalid_args_name_the_argument_and_store_nothing(app, args, named):
    @app.task(name="t.pair")
    def pair(a, b):
        return [a, b]

    with pytest.raises(InvalidArgument) as caught:
        pair.submit(**args)
    assert named in str(caught.value)
    with pytest.raises(InvalidArgument) as caught:
        app.submit("t.pair", args=args)
    assert named in str(caught.value)
    _assert_nothing_stored(app)


def test_non_string_argument_name_is_an_invalid_argument(app):
    @app.task(name="t.pair2")
    def pair(a, b):
        return [a, b]

    with pytest.raises(InvalidArgument, match="7"):
        pair.submit_many([{"a": 1, "b": 2, 7: "x"}])
    _assert_nothing_stored(app)


def test_non_string_argument_name_by_name_is_an_invalid_argument(app, start_worker):
    """`App.submit(name, args=...)` must validate like `Task.submit`: InvalidArgument, nothing stored."""

    @app.task(name="t.pair3")
    def pair(a, b):
        return [a, b]

    with pytest.raises(InvalidArgument, match="7"):
        app.submit("t.pair3", args={"a": 1, "b": 2, 7: "x"})
    _assert_nothing_stored(app)


@pytest.mark.parametrize("args", ["ab", 5], ids=["str", "int"])
def test_args_that_are_not_a_mapping_are_an_invalid_argument(app, args):
    @app.task(name="t.pair4")
    def pair(a=None, b=None):
        return [a, b]

    with pytest.raises(InvalidArgument):
        app.submit("t.pair4", args=args)
    _assert_nothing_stored(app)


def test_submit_many_is_all_or_none(app):
    @app.task(name="t.one")
    def one(x):
        return x

    with pytest.raises(InvalidArgument, match=r"\[1\]|'x'"):
        one.submit_many([{"x": 1}, {"x": [1, {2}]}, {"x": 3}])
    _assert_nothing_stored(app)
    handles = one.submit_many([{"x": i} for i in range(5)])
    assert len(handles) == 5
    assert app.store.status_counts()[RunStatus.QUEUED] == 5


def test_a_result_that_is_not_json_fails_the_run(app, start_worker):
    @app.task(name="t.bad_result")
    def bad_result():
        return {1, 2}

    start_worker()
    with pytest.raises(tidegate.RunFailed) as caught:
        bad_result.submit().wait(timeout=30)
    assert "result" in caught.value.error and "set" in caught.value.error


def test_wait_timeout_leaves_the_run_queued(app):
    @app.task(name="t.never_run")
    def never_run():
        return 1

    handle = never_run.submit()
    with pytest.raises(tidegate.WaitTimeout):
        handle.wait(timeout=0.2)
    assert handle.status() is RunStatus.QUEUED


def test_many_runs_through_one_worker(app, start_worker):
    @app.task(name="t.square")
    def square(x: int) -> int:
        return x * x

    handles = square.submit_many([{"x": i} for i in range(200)])
    start_worker(max_workers=8)
    assert [h.wait(timeout=60) for h in handles] == [i * i for i in range(200)]
    counts = app.store.status_counts()
    assert counts[RunStatus.COMPLETED] == 200
    assert sum(counts.values()) == 200
