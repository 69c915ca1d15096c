"""The plain submit's fast paths (issues 24/29) keep what they skip: on both adapters.

A plain `submit` shares one `TaskOptions` per task definition and skips writing the app's
declarations once all are written; each test here fails if its fast path skipped too much
(a mutation of it: options cached regardless of the definition, a registry that never writes
again after its first write).
"""

from dataclasses import replace

from tidegate import App, Concurrency


def test_declarations_made_after_a_submit_are_written_by_the_next(app: App) -> None:
    @app.task(name="fast.first", queue="fast_one")
    def first() -> None:
        return None

    first.submit()

    app.queue("fast_one", concurrency=Concurrency(global_limit=3))

    @app.task(name="fast.second", queue="fast_two")
    def second() -> None:
        return None

    second.submit()
    assert app.store.get_task("fast.second") is not None
    assert app.store.rules().queues["fast_one"].concurrency.global_limit == 3
    app.queue("fast_one", concurrency=Concurrency(global_limit=5))  # a change of limit alone, no new task
    first.submit()
    assert app.store.rules().queues["fast_one"].concurrency.global_limit == 5


def test_a_plain_submit_follows_its_task_definition(app: App) -> None:
    @app.task(name="fast.priority", queue="fast_one")
    def task() -> None:
        return None

    assert task.submit().info().priority == 0
    assert task.submit().info().priority == 0  # the shared options, the same answer
    task.definition = replace(task.definition, priority=7)
    assert task.submit().info().priority == 7
