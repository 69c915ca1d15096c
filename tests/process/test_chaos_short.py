"""The chaos suite's short mode on both backends: every scenario, no violation.

The PostgreSQL half starts a private cluster (the suite restarts it and
freezes its backends, which the shared test server must never see), so it
needs the server binaries: without `initdb` it is skipped locally and fails
in CI, like the postgres variants of the behaviour suite.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chaos.__main__ import run_backend
from chaos.cluster import postgres_bin

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_short_chaos_finds_no_violation(backend: str, tmp_path: Path) -> None:
    if backend == "postgres" and postgres_bin() is None:
        message = "initdb is not installed: the chaos suite cannot start its private PostgreSQL cluster"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message + " (CI=true)", pytrace=False)
        pytest.skip(message)
    results = run_backend(backend, "short", seed=10, folder=tmp_path)
    violations = [f"{result.name}: {violation}" for result in results for violation in result.violations]
    assert violations == []
