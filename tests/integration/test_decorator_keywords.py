"""The decorators' keywords are written once (`app/keywords.py`): each is taken with its default,
and a misspelt one is refused as a Python signature refuses it, never dropped silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidegate import App


def named(wf: object) -> None:
    return None


def test_a_misspelt_keyword_is_refused_by_each_decorator(tmp_path: Path) -> None:
    with App(f"sqlite:///{tmp_path}/k.db") as app:
        for decorator, word in ((app.task, "max_attemps"), (app.workflow, "exector"), (app.step, "pool_slot")):
            with pytest.raises(TypeError, match=f"unexpected keyword argument '{word}'"):
                decorator(**{word: 1})


def test_keywords_left_out_take_the_one_default(tmp_path: Path) -> None:
    with App(f"sqlite:///{tmp_path}/k.db") as app:
        bare = app.task(named).definition
        given = app.task(name="given", queue="q", max_attempts=3, retry_backoff="2s")(named).definition
        flow = app.workflow(name="flow")(named).definition
    assert (bare.queue, bare.priority, bare.max_attempts) == ("default", 0, 1)
    assert (given.queue, given.max_attempts, given.retry_backoff) == ("q", 3, 2.0)
    assert (flow.queue, flow.max_attempts, flow.retry_backoff) == (bare.queue, bare.max_attempts, bare.retry_backoff)
