"""A database reached through a transaction-mode pooler (PgBouncer, RDS Proxy, Supavisor).

Such a pooler lends a server connection for one transaction at a time: the
next transaction of the same client may run on another server session, and
whatever one client left in a session (a setting, a prepared statement, a
LISTEN) is seen by whichever client is lent that session next. So a URL
declared pooled (`?tidegate_pooler=transaction`, read here and removed before
libpq sees the URL) gets connections that keep nothing in their session:

- the injected clock's offset is written into each statement that reads the
  clock (`clocked_sql`), instead of a session setting: no extra statement,
  and a session setting some other client left behind is never read;
- no server-side prepared statements (PgBouncer keeps them only from 1.21,
  with `max_prepared_statements`; Debian bookworm ships 1.18): every
  statement is parsed and planned at each call;
- no session settings: `jit` and the default isolation level are the role's
  or database's (`check_session_defaults` refuses an isolation other than
  READ COMMITTED, which every verb is written for, and warns once when JIT is on);
- LISTEN goes to `TIDEGATE_DATABASE_DIRECT`, a URL that reaches PostgreSQL
  itself; without it the workers find work by their backstop poll (a warning
  says so once per process).

A URL parameter rather than a process-wide setting, because it belongs to
one database: it travels with the URL through every door (`App(url)`,
`--database`, worker processes, `serve`, a step's pod), and one process may
open a pooled and a direct store side by side. docs/postgres-pooler.md.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import psycopg

from tidegate.domain.errors import ConfigurationError
from tidegate.storage.urls import masked

log = logging.getLogger(__name__)

POOLER_PARAMETER = "tidegate_pooler"
POOLER_MODES = ("transaction",)
DIRECT_SETTING = "TIDEGATE_DATABASE_DIRECT"

_PARAMETER = re.compile(rf"(?:^|&){POOLER_PARAMETER}=([^&]*)")


@dataclass(frozen=True)
class Endpoint:
    """Where the store's connections go, and where its LISTEN goes."""

    url: str  # given to libpq: the URL without tidegate's own parameter
    pooled: bool  # reached through a transaction-mode pooler
    listen_url: str | None  # the same URL when direct; TIDEGATE_DATABASE_DIRECT (or None: poll) when pooled


def endpoint(url: str, environ: dict[str, str] | None = None) -> Endpoint:
    """Split `tidegate_pooler` out of a PostgreSQL URL; a bad value is a one-line error naming it."""
    base, _, query = url.partition("?")
    found = [match.group(1) for match in _PARAMETER.finditer(query)]
    if not found:
        return Endpoint(url, pooled=False, listen_url=url)
    if len(found) > 1 or found[0] not in POOLER_MODES:
        raise ConfigurationError(
            f"database URL {masked(url)!r}: {POOLER_PARAMETER} must be given once, as"
            f" {' or '.join(POOLER_MODES)} (got {', '.join(repr(value) for value in found)})"
        )
    kept = "&".join(part for part in query.split("&") if part and not part.startswith(f"{POOLER_PARAMETER}="))
    direct = (os.environ if environ is None else environ).get(DIRECT_SETTING) or None
    if direct is not None and not direct.startswith(("postgresql://", "postgres://")):
        raise ConfigurationError(f"{DIRECT_SETTING} {masked(direct)!r} is not a postgresql:// URL")
    return Endpoint(f"{base}?{kept}" if kept else base, pooled=True, listen_url=direct)


@lru_cache(maxsize=4096)
def clocked_sql(text: str, offset: float) -> str:
    """`text` reading the server's clock moved by `offset` seconds, without the session setting.

    `tidegate_now()` and `tidegate_statement_timestamp()` (migration 0006) add the
    offset a session setting holds; here the same sum is written out, with the
    offset as a literal (a float's repr is a valid SQL number). At offset 0 the
    bare server clock. Cached per (text, offset): a test moves its clock a few
    times, production never.
    """
    shift = f" + make_interval(secs => ({offset!r})::double precision)" if offset else ""
    return text.replace("tidegate_now()", f"(now(){shift})").replace(
        "tidegate_statement_timestamp()", f"(statement_timestamp(){shift})"
    )


_warned: set[str] = set()


def warn_once(key: str, message: str, *args: Any) -> None:
    """Log `message` at WARNING the first time `key` is seen in this process."""
    if key not in _warned:
        _warned.add(key)
        log.warning(message, *args)


def check_session_defaults(connection: psycopg.Connection[Any], where: str) -> None:
    """Refuse a pooled database whose transactions do not default to READ COMMITTED; warn if JIT is on.

    On a direct connection both are session settings of each pooled connection
    (database.py, `_configure`); through a pooler they must come from the
    role or the database (ALTER ROLE ... SET), since a session setting would
    stay with the server session for other clients.
    """
    isolation, jit = connection.execute(
        "SELECT current_setting('default_transaction_isolation'), current_setting('jit')"
    ).fetchone() or ("read committed", "off")
    if isolation != "read committed":
        raise ConfigurationError(
            f"PostgreSQL behind the pooler at {where} runs transactions at {isolation!r} by default; tidegate needs"
            " 'read committed' (ALTER ROLE <user> SET default_transaction_isolation = 'read committed')"
        )
    if jit == "on":
        warn_once(
            f"jit:{where}",
            "PostgreSQL behind the pooler at %s has JIT on: a plan over a large backlog may compile for"
            " 40-200 ms per call (ALTER ROLE <user> SET jit = off)",
            where,
        )
