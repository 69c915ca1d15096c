"""SQLite: paging through runs (the HTTP API's `GET /runs`), newest first, by keyset.

Its own aggregate so the reads an operator pages through grow apart from the
runs verbs the workers depend on. The read is written once
(storage/shared/reads.py); the SQL is browse.sql.
"""

from __future__ import annotations

from tidegate.storage import port
from tidegate.storage.shared.reads import BrowseReads
from tidegate.storage.sqlite.database import Aggregate


class Browse(Aggregate, BrowseReads, port.BrowseVerbs):
    """The browsing verbs of the storage port."""
