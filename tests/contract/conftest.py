"""Fixtures of the conformance suite (tests driving the Store port directly).

The shared fixtures (backend parametrization, apps, workers) live in
tests/conftest.py; the helpers below are re-exported because this folder's
modules import them as `.conftest`.
"""

from tests.conftest import event_types, execute_sql, raw_store, wait_until

__all__ = ["event_types", "execute_sql", "raw_store", "wait_until"]
