"""`options(tags="tenant=a")` says which parameter is wrong and how to write it (issue 15 item 10)."""

from __future__ import annotations

import re

import pytest

from tidegate import App, InvalidArgument


def test_tags_as_text_is_refused_naming_the_parameter_and_the_dict_to_write(tmp_path) -> None:
    with App(f"sqlite:///{tmp_path}/t.db") as app:
        task = app.task(name="t")(lambda: None)
        expected = "tags must be a dict of str to str, got str 'tenant=a' (write tags={'tenant': 'a'})"
        with pytest.raises(InvalidArgument, match=re.escape(expected)):
            task.options(tags="tenant=a")
        assert app.store.page_runs() == []
