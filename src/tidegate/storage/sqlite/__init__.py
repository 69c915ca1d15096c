"""The embedded adapter: one SQLite file in WAL mode, shared by local processes."""

from tidegate.storage.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
