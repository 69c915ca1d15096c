"""The scale benchmarks' smoke tests: each `--quick` mode runs end to end on both backends.

They fill a backlog in SQL (copies of runs submitted through tidegate) and time
a worker's first completions; these tests only prove the machinery holds
together (the fill is claimable, the drain reaches its count, the ratio is
printed), never a figure: figures need a quiet machine and the full sizes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import POSTGRES_ADMIN_URL, REPO_ROOT

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("script", "row_end"), [("backlog.py", r"\d\.\d\d"), ("tenants.py", r"\d\.\d\dx")])
def test_quick_mode_drains_on_both_backends(script: str, row_end: str) -> None:
    completed = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / script), "--quick"],
        cwd=REPO_ROOT / "benchmarks",
        env={**os.environ, "TIDEGATE_BENCH_PG": POSTGRES_ADMIN_URL, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    rows = re.findall(rf"^(sqlite|postgres) \| [\d,]+ \| [\d,]+ \| {row_end}$", completed.stdout, re.MULTILINE)
    assert sorted(rows) == ["postgres", "sqlite"], completed.stdout
