"""Fixtures of the multi-process proofs (worker subprocesses, chaos, outages).

The shared fixtures (backend parametrization, apps, `worker_processes`) live
in tests/conftest.py; the helpers below are re-exported because this folder's
modules import them as `.conftest`.
"""

from tests.conftest import POSTGRES_ADMIN_URL, REPO_ROOT, execute_sql, read_execution_log, wait_until

__all__ = ["POSTGRES_ADMIN_URL", "REPO_ROOT", "execute_sql", "read_execution_log", "wait_until"]
