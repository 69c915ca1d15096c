"""Fixtures of the integration tests (an App and its workers in one process).

The shared fixtures (backend parametrization, apps, workers) live in
tests/conftest.py; the helpers below are re-exported because this folder's
modules import them as `.conftest`.
"""

from tests.conftest import REPO_ROOT, event_types, execute_sql, read_execution_log, wait_status, wait_until

__all__ = ["REPO_ROOT", "event_types", "execute_sql", "read_execution_log", "wait_status", "wait_until"]
