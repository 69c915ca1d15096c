"""The statuses retention may delete are written in each dialect's SQL: pinned to the domain's rule.

`domain.retention.PRUNABLE_STATUSES` (the finished statuses) is the rule; both
dialects list it literally (a partial index needs a literal list to be used),
in every statement that picks or deletes runs, so a status added to the runs'
life (a waiting parent, say) is kept by retention until this rule says otherwise.
"""

from __future__ import annotations

import re
from importlib import resources

import pytest

from tidegate.domain.retention import PRUNABLE_STATUSES
from tidegate.storage.shared.sqlfile import parse_queries


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_every_retention_statement_on_runs_names_exactly_the_finished_statuses(dialect):
    text = resources.files(f"tidegate.storage.{dialect}").joinpath("retention.sql").read_text(encoding="utf-8")
    lists = [
        sorted(re.findall(r"'(\w+)'", found))
        for sql in parse_queries(text).values()
        for found in re.findall(r"status IN \(([^)]*)\)", sql)
    ]
    assert lists and all(listed == sorted(PRUNABLE_STATUSES) for listed in lists)
    assert PRUNABLE_STATUSES == ("canceled", "completed", "failed")
