"""Building a workflow's DAG, step keys, declarations and executors: no storage involved."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from concurrent.futures.process import BrokenProcessPool

import loky
import pytest

import tidegate
from tidegate import ConfigurationError, Executor, InvalidArgument, Workflow, WorkflowError
from tidegate.workflow.builder import MapNode, StepNode, build_dag, resolve
from tidegate.workflow.executors import RunCaps, process_pool


@pytest.fixture
def app(tmp_path):
    return tidegate.App(f"sqlite:///{tmp_path}/unused.db")  # App() opens nothing until used


def _steps(app):
    @app.step(pool="database", pool_slots=2)
    def heavy_query(day: str) -> int:
        return len(day)

    @app.step(pools={"database": 1, "warehouse_api": 1})
    def publish(counts: list[int]) -> int:
        return sum(counts)

    @app.step
    def days_of(month: str) -> list[str]:
        return [f"{month}-{day:02d}" for day in range(1, 4)]

    return heavy_query, publish, days_of


def test_step_keys_are_stable_and_deterministic(app):
    heavy_query, publish, days_of = _steps(app)

    @app.workflow(name="t.nightly", queue="etl")
    def nightly(wf: Workflow, days: list[str]):
        counts = wf.map(heavy_query, days, concurrency=3)
        again = wf.step(heavy_query, "x")
        third = wf.map(heavy_query, wf.step(days_of, "2026-11"))
        return wf.step(publish, [counts, again, third])

    first = build_dag(nightly.workflow_definition, {"days": ["a", "b"]})
    second = build_dag(nightly.workflow_definition, {"days": ["a", "b"]})
    assert list(first.nodes) == ["heavy_query", "heavy_query:2", "days_of", "heavy_query:3", "publish"]
    assert list(second.nodes) == list(first.nodes)  # a recovered run finds its checkpoints by these keys
    mapped = first.nodes["heavy_query"]
    assert isinstance(mapped, MapNode) and mapped.concurrency == 3 and mapped.items == ("a", "b")
    assert mapped.item_key(3) == "heavy_query[3]"
    assert first.nodes["heavy_query:3"].item_key(0) == "heavy_query:3[0]"
    assert first.nodes["heavy_query:3"].deps == ("days_of",)
    # refs nested in a list are dependencies, in order, and resolve to the outputs
    published = first.nodes["publish"]
    assert isinstance(published, StepNode)
    assert published.deps == ("heavy_query", "heavy_query:2", "heavy_query:3")
    outputs = {"heavy_query": [1, 1], "heavy_query:2": 1, "heavy_query:3": [10]}
    assert resolve(published.args, outputs) == ([[1, 1], 1, [10]],)
    assert first.result is not None and first.result.key == "publish"


def test_a_workflow_that_returns_nothing_has_no_result(app):
    heavy_query, _, _ = _steps(app)

    @app.workflow(name="t.side_effects")
    def side_effects(wf: Workflow):
        wf.step(heavy_query, "x")

    assert build_dag(side_effects.workflow_definition, {}).result is None


def test_submit_checks_args_against_the_workflow_signature_without_the_builder(app):
    @app.workflow(name="t.nightly", queue="etl")
    def nightly(wf, days: list[str]):
        return None

    nightly.check_args({"days": ["x"]})
    with pytest.raises(InvalidArgument, match="nightly"):
        nightly.check_args({"wf": 1, "days": []})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("plain", "plain_function is not a step: decorate it with @app.step"),
        ("task", "is not a step: decorate it with @app.step"),
        ("workflow", "is a workflow, not a step"),
        ("direct_call", "called directly inside workflow"),
        ("foreign_ref", "belongs to another workflow"),
        ("map_not_list", "items must be a list"),
        ("map_window", "concurrency must be an integer >= 1"),
        ("returns_value", "return the ref of one of its steps"),
    ],
)
def test_misuse_is_refused_while_building_with_a_clear_error(app, body, message):
    heavy_query, _, _ = _steps(app)

    def plain_function(x):
        return x

    @app.task(name="t.a_task")
    def a_task(x: int) -> int:
        return x

    @app.workflow(name="t.inner")
    def inner(wf):
        return None

    leaked = []

    @app.workflow(name="t.other")
    def other(wf):
        leaked.append(wf.step(heavy_query, "x"))

    build_dag(other.workflow_definition, {})

    misuses = {
        "plain": lambda wf: wf.step(plain_function, 1),
        "task": lambda wf: wf.step(a_task, 1),
        "workflow": lambda wf: wf.step(inner),
        "direct_call": lambda wf: heavy_query("x"),
        "foreign_ref": lambda wf: wf.step(heavy_query, leaked[0]),
        "map_not_list": lambda wf: wf.map(heavy_query, "abc"),
        "map_window": lambda wf: wf.map(heavy_query, ["a"], concurrency=0),
    }

    @app.workflow(name="t.misuse")
    def misuse(wf):
        if body == "returns_value":
            return 42
        misuses[body](wf)
        return None

    with pytest.raises(WorkflowError, match=message):
        build_dag(misuse.workflow_definition, {})


def test_steps_cannot_be_added_once_the_workflow_is_built(app):
    heavy_query, _, _ = _steps(app)
    kept = []

    @app.workflow(name="t.keeps_builder")
    def keeps_builder(wf):
        kept.append(wf)

    build_dag(keeps_builder.workflow_definition, {})
    with pytest.raises(WorkflowError, match=r"after workflow .* was built"):
        kept[0].step(heavy_query, "x")


def test_a_step_called_outside_a_workflow_just_runs(app):
    heavy_query, _, _ = _steps(app)
    assert heavy_query("abcd") == 4


def test_bad_declarations_fail_at_import(app):
    def noop() -> None:
        return None

    with pytest.raises(ConfigurationError, match="not both"):
        app.step(pool="a", pools={"b": 1})(noop)
    with pytest.raises(ConfigurationError, match="pool_slots= needs pool="):
        app.step(pool_slots=2)(noop)
    with pytest.raises(InvalidArgument, match="step key"):
        app.step(lambda: None)  # '<lambda>' cannot be a step key: give name=
    assert app.step(name="named")(lambda: None).name == "named"
    with pytest.raises(InvalidArgument, match="slots must be an integer from 1 to 2147483647"):
        app.step(pool="a", pool_slots=0)(noop)
    with pytest.raises(ConfigurationError, match="':' and '\\[' are kept"):
        app.step(name="a:2")(noop)
    with pytest.raises(ConfigurationError, match="async"):

        @app.workflow(name="t.not_a_builder")
        async def not_a_builder(wf):
            return None

    with pytest.raises(ConfigurationError, match="max_workers must be an integer >= 1"):
        Executor.parallel(max_workers=0)
    with pytest.raises(ConfigurationError, match=r"executor must be a tidegate\.Executor"):
        app.workflow(executor="parallel")


def test_executor_caps_default_to_the_cpus_this_process_may_use():
    # loky.cpu_count: the CPUs this process may use (affinity, and any cgroup quota below it)
    assert 1 <= Executor.parallel().process_slots == loky.cpu_count() <= len(os.sched_getaffinity(0))
    assert Executor.parallel(max_workers=8).process_slots == 8
    assert Executor.in_process().process_slots == 1


def test_in_process_runs_one_step_at_a_time_and_off_the_loop():
    caps = RunCaps(Executor.in_process())
    active = []
    peak = []

    async def async_step(n: int) -> int:
        active.append(n)
        peak.append(len(active))
        await asyncio.sleep(0.02)
        active.remove(n)
        return n

    def sync_step(n: int) -> int:
        time.sleep(0.02)
        return n * 10

    async def one(n: int) -> int:
        is_async = n % 2 == 0
        async with caps.slot(is_async):
            if is_async:
                return await caps.start(async_step, True, (n,), {})
            return await caps.start(sync_step, False, (n,), {})

    async def main() -> list[int]:
        ticks = 0

        async def ticker() -> None:  # the loop stays free while a sync step sleeps on its thread
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.005)

        ticking = asyncio.create_task(ticker())
        results = await asyncio.gather(*(one(n) for n in range(6)))
        ticking.cancel()
        assert ticks >= 10
        return results

    assert asyncio.run(main()) == [0, 10, 2, 30, 4, 50]
    assert max(peak) == 1


def _pid_of_step(n: int) -> tuple[int, int]:
    return os.getpid(), n


def test_parallel_runs_sync_steps_in_other_processes_and_async_steps_on_the_loop():
    caps = RunCaps(Executor.parallel(max_workers=2, max_async_concurrent=3))

    async def async_step(n: int) -> int:
        return os.getpid() + n

    async def main() -> tuple[list[tuple[int, int]], int]:
        synced = await asyncio.gather(*(caps.start(_pid_of_step, False, (n,), {}) for n in range(4)))
        asynced = await caps.start(async_step, True, (0,), {})
        return list(synced), asynced

    synced, asynced = asyncio.run(main())
    assert [n for _, n in synced] == [0, 1, 2, 3]
    assert all(pid != os.getpid() for pid, _ in synced)
    assert asynced == os.getpid()


def test_a_workflow_uses_its_own_executor_else_the_apps_default(tmp_path):
    default = Executor.parallel(max_workers=2)
    app = tidegate.App(f"sqlite:///{tmp_path}/unused.db", executor=default)

    @app.workflow(name="t.inherits")
    def inherits(wf):
        return None

    @app.workflow(name="t.own", executor=Executor.in_process())
    def own(wf):
        return None

    assert inherits.workflow_definition.executor == default
    assert own.workflow_definition.executor == Executor.in_process()
    assert tidegate.App(f"sqlite:///{tmp_path}/other.db").executor == Executor.in_process()
    with pytest.raises(ConfigurationError, match=r"executor must be a tidegate\.Executor"):
        tidegate.App(f"sqlite:///{tmp_path}/bad.db", executor="parallel")


def _die() -> None:
    os._exit(3)


def test_one_process_pool_per_process_shared_by_threads_and_replaced_when_broken():
    pools = []
    threads = [threading.Thread(target=lambda: pools.append(process_pool(2))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert pools[0] is pools[1] is process_pool(1)  # every worker thread, every run: one pool
    caps = RunCaps(Executor.parallel(max_workers=2))

    async def main() -> tuple[BaseException | None, tuple[int, int]]:
        try:
            await caps.start(_die, False, (), {})
        except BaseException as error:  # a process that died fails its step...
            died: BaseException | None = error
        else:
            died = None
        return died, await caps.start(_pid_of_step, False, (5,), {})  # ...and the next step still runs

    died, (pid, n) = asyncio.run(main())
    assert isinstance(died, BrokenProcessPool) and n == 5 and pid != os.getpid()
