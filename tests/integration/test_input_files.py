"""The embedded database is private to its owner, whatever the umask (SQLite only).

The test sets the usual umask 022 itself (and restores it): under it a file
made with default modes would be world-readable.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidegate import App


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_database_folder_and_its_files_are_private(tmp_path, umask_022):
    folder = tmp_path / "project" / ".tidegate"
    app = App(f"sqlite:///{folder}/tidegate.db")

    @app.task(name="files.echo")
    def echo(n: int) -> int:
        return n

    try:
        echo.submit(n=1)
        worker = app.worker(poll_interval="50ms").start()  # the listener drops its wake-up marker file
        try:
            assert echo.submit(n=2).wait(timeout=30) == 2
            files = sorted(path.name for path in folder.iterdir())
            assert {"tidegate.db", "tidegate.db-wal", "tidegate.db-shm", "tidegate.db.wake"} <= set(files), files
            for path in folder.iterdir():
                assert mode(path) == (0o700 if path.is_dir() else 0o600), (path, oct(mode(path)))
            markers = list((folder / "tidegate.db.wake").iterdir())
            assert markers, "a listening worker leaves a marker"
            assert all(mode(marker) == 0o600 for marker in markers), [oct(mode(m)) for m in markers]
        finally:
            worker.stop(timeout=30, grace=0)
    finally:
        app.close()
    assert mode(folder) == 0o700
    assert mode(folder.parent) == 0o700  # created by tidegate too
    assert os.umask(0o022) == 0o022  # the process umask was left alone


def test_a_folder_the_user_made_keeps_its_mode(tmp_path, umask_022):
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o750)
    App(f"sqlite:///{folder}/t.db").store.close()
    assert mode(folder) == 0o750
    assert mode(folder / "t.db") == 0o600
