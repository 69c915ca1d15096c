"""The embedded database's folder and files are private to their owner.

Args and results are stored in clear, so under the usual umask 022 a
database created with default modes could be read by every local user. The
modes are given when each file or folder is created (never by changing the
process umask, which is process-wide and racy): folders 0700, the database
file 0600 before SQLite first opens it. SQLite creates the -wal and -shm
files with the database file's mode, so they follow. A folder or file that
already exists is left as its owner made it.
"""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path

FOLDER_MODE = 0o700
FILE_MODE = 0o600


def private_folder(folder: Path) -> None:
    """Create `folder` and any missing parents with mode 0700; existing ones are not touched."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for path in reversed(missing):
        with suppress(FileExistsError):  # another process made it meanwhile
            path.mkdir(mode=FOLDER_MODE)


def private_file(path: Path) -> None:
    """Create an empty `path` with mode 0600 unless it exists (SQLite takes an empty file as a new database)."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return
    os.close(descriptor)
