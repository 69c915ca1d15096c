"""The PgBouncer suite: contracts and process tests through a transaction-mode pooler.

`database_url` is here the URL of a private PgBouncer (tests/pooler/pgbouncer.py)
in front of the test's own schema, declared pooled (`?tidegate_pooler=transaction`),
with `TIDEGATE_DATABASE_DIRECT` set to the schema's direct URL for LISTEN. The
contract modules imported by this folder's test modules run unchanged on it;
their fixtures and their per-backend expected failures come from
tests/contract/conftest.py (PgBouncer is the PostgreSQL adapter, so the
`postgres` parameter: a PostgreSQL difference is one here too).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.contract.conftest import pytest_collection_modifyitems as _contract_expectations
from tests.contract.conftest import pytest_configure, store
from tests.pooler.pgbouncer import BINARY, PgBouncer

__all__ = ["pytest_configure", "store"]

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The contracts' expected failures; and a race (tests/races.py) is not run through the pooler.

    A race orders two transactions by watching the server's locks of each
    party's backend, which it finds by pid; through a pooler a client's pid is
    PgBouncer's, and its transactions move between server sessions. What a race
    proves is the SQL's serialisation, the same statements with or without a
    pooler, and tests/contract proves it directly.
    """
    ours = [item for item in items if HERE in Path(str(item.path)).parents]
    _contract_expectations(config, ours)
    for item in ours:
        function = getattr(item, "function", None)
        calls_races = function is not None and "races" in function.__code__.co_names
        if calls_races or item.get_closest_marker("race") is not None:
            item.add_marker(pytest.mark.skip(reason="a race finds server backends by pid, which a pooler hides"))


@pytest.fixture
def pgbouncer(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[PgBouncer]:
    """A private PgBouncer in transaction mode for this test's schema; LISTEN goes direct."""
    if not os.path.exists(BINARY):
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"pgbouncer is not installed ({BINARY}): scripts/setup.sh installs it", pytrace=False)
        pytest.skip(f"pgbouncer is not installed ({BINARY})")
    params = conninfo_to_dict(postgres_url)
    schema = postgres_url.partition("?")[2].removeprefix("options=-csearch_path%3D")
    bouncer = PgBouncer(params.get("host", "127.0.0.1"), int(params.get("port", 5432)), params["dbname"], schema)
    monkeypatch.setenv("TIDEGATE_DATABASE_DIRECT", postgres_url)
    try:
        yield bouncer
    finally:
        bouncer.stop()


@pytest.fixture(params=["postgres"])
def database_url(request: pytest.FixtureRequest, pgbouncer: PgBouncer) -> str:
    """Every contract of this folder, through the pooler (the `postgres` id: the same adapter)."""
    return pgbouncer.url
