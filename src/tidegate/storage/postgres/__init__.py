"""The distributed adapter: PostgreSQL shared by workers on many machines."""

from tidegate.storage.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
