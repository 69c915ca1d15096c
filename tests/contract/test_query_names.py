"""Both dialects name their SQL alike, and every named query is used (issue 11).

Each adapter keeps one .sql file per aggregate, with the same file names, and
each statement has one `-- name:`. A statement that does the same job has the
same name in both dialects. A dialect may split a statement the other writes
as one (SQLite has no data-modifying CTEs): such a step is named
`<name>_<step>` after a name both define or a port verb (`claim_runs_holders`,
`sweep_deadlines_fail`, `enqueue_fence`). The only other names are a
dialect's own mechanisms, listed below with why the other has none.
"""

from __future__ import annotations

import re
from importlib import resources

import pytest

from tidegate.storage.port import VERBS
from tidegate.storage.shared.sqlfile import parse_queries

DIALECTS = ("sqlite", "postgres")

MECHANISMS = {
    "sqlite": {
        "release_holders": "PostgreSQL deletes an ended attempt's holders inside the statement that ends it",
        "submit_in_lock": "makes the caller's open transaction the one writer; PostgreSQL locks per ceiling and key",
        "claim_usage_and_rates": "a rated claim's usage and live rate states in one read (the single writer holds "
        "both); PostgreSQL locks the states it charges",
    },
    "postgres": {
        "upsert_scopes": "scope lock rows; SQLite's single writer serializes every claimer",
        "lock_scopes": "scope row locks in key order; as above",
        "try_lock_scopes": "a scope row lock tried without waiting, below a key held; as above",
        "claim_fence": "the shared rules fence; SQLite's BEGIN IMMEDIATE already excludes a rules change",
        "claim_turn": "one claimer at a time per limited queue; SQLite has one writer",
        "due_now": "a pipelined 'look again at once'; SQLite answers it in Python",
        "unique_lock": "one keyed submitter at a time per key; SQLite has one writer",
        "submit_identity": "the store's database and schema; SQLite compares the caller's file (PRAGMA database_list)",
        "submit_in_check": "the caller's database, schema, isolation and clock offset; SQLite: its file, one writer",
    },
}


def files(dialect: str) -> dict[str, str]:
    folder = resources.files(f"tidegate.storage.{dialect}")
    return {entry.name: entry.read_text(encoding="utf-8") for entry in folder.iterdir() if entry.name.endswith(".sql")}


def names(dialect: str) -> dict[str, str]:
    """Every query name of the dialect -> its file."""
    found: dict[str, str] = {}
    for file, text in files(dialect).items():
        headers = re.findall(r"^--\s*name:\s*(\S+)\s*$", text, re.MULTILINE)
        assert len(headers) == len(set(headers)) == len(parse_queries(text)), f"{dialect}/{file}: a name twice"
        for name in headers:
            assert name not in found, f"{dialect}: {name} in {found[name]} and {file}"
            found[name] = file
    return found


def port_verbs() -> set[str]:
    return set(VERBS)


def test_both_dialects_have_the_same_files():
    assert set(files("sqlite")) == set(files("postgres"))


def test_both_dialects_name_the_same_statements_alike():
    sqlite, postgres = names("sqlite"), names("postgres")
    shared = set(sqlite) & set(postgres)
    bases = shared | port_verbs()
    for dialect, own, other in (("sqlite", sqlite, postgres), ("postgres", postgres, sqlite)):
        alone = set(own) - set(other)
        steps = {name for name in alone if any(name.startswith(base + "_") for base in bases)}
        assert alone - steps == set(MECHANISMS[dialect]), f"{dialect}: names the other dialect lacks"
    for name in shared:
        assert sqlite[name] == postgres[name], f"{name}: {sqlite[name]} on SQLite, {postgres[name]} on PostgreSQL"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_named_query_is_used(dialect):
    """Each name is asked for by the adapter's code (`_q("name")`, or the store's `queries["name"]`), or
    by the reads both adapters share (storage/shared/reads.py: `self._rows("name")`)."""
    folders = [resources.files(f"tidegate.storage.{dialect}"), resources.files("tidegate.storage.shared")]
    code = "".join(
        entry.read_text(encoding="utf-8")
        for folder in folders
        for entry in folder.iterdir()
        if entry.name.endswith(".py")
    )
    unused = sorted(name for name in names(dialect) if f'"{name}"' not in code)
    assert unused == []
