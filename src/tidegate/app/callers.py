"""A caller's connection as the store takes it: SQLAlchemy's wrappers unwrapped to the driver's.

`options(connection=...)` takes the driver connection a store writes with (psycopg on
PostgreSQL, sqlite3 on SQLite) or SQLAlchemy's `Connection`, `Session`, `AsyncConnection` or
`AsyncSession` over one. SQLAlchemy stays optional: it is imported only when the object given
is one of its own. A SQLAlchemy transaction is begun when none is (as its autobegin would on a
statement), so that the caller's `commit()` commits the runs with the caller's writes, and
`rollback()` leaves nothing.
"""

from __future__ import annotations

from typing import Any

from tidegate.domain.errors import InvalidArgument


def driver_connection(connection: Any) -> Any:
    """The driver connection under `connection` (itself when it is not SQLAlchemy's)."""
    if not _is_sqlalchemy(connection):
        return connection
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

    if isinstance(connection, Session):
        connection = connection.connection()  # the session's transaction begins, if it had none
    if isinstance(connection, Connection):
        if not connection.in_transaction():
            connection.begin()
        return connection.connection.driver_connection
    raise InvalidArgument(
        f"connection= is a SQLAlchemy {type(connection).__name__}: a sync submit takes a Connection or a Session "
        "(an AsyncConnection or AsyncSession with submit_async)"
    )


async def driver_connection_async(connection: Any) -> Any:
    """`driver_connection` from an event loop: SQLAlchemy's async wrappers too."""
    if not _is_sqlalchemy(connection):
        return connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    if isinstance(connection, AsyncSession):
        connection = await connection.connection()
    if isinstance(connection, AsyncConnection):
        if not connection.in_transaction():
            await connection.begin()
        raw = await connection.get_raw_connection()
        return raw.driver_connection
    return driver_connection(connection)


def _is_sqlalchemy(connection: Any) -> bool:
    """Whether the object is SQLAlchemy's (or of a subclass of one of its classes, such as a user's Session).
    None, the common case (no caller's connection), is answered first: every submit asks."""
    if connection is None:
        return False
    return any(kind.__module__.split(".", 1)[0] == "sqlalchemy" for kind in type(connection).__mro__)
