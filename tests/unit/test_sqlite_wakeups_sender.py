"""SQLite's notifier calls its process's listeners directly; a worker's own cycle skips that
worker's listener, and only it (issue 16). The `data_version` backstop still sees the commit,
so on SQLite a worker is still woken by its own commits, at most once a backstop interval."""

from __future__ import annotations

from pathlib import Path

from tidegate.storage.sqlite.wakeups import DatagramListener, DatagramNotifier


def test_a_cycles_wake_up_skips_only_its_own_workers_listener(tmp_path: Path) -> None:
    folder = tmp_path / "wake"
    folder.mkdir()
    database = tmp_path / "db.sqlite"
    calls: list[str] = []
    listeners = [
        DatagramListener(folder, database, lambda: calls.append("w1"), own="w1"),
        DatagramListener(folder, database, lambda: calls.append("w2"), own="w2"),
        DatagramListener(folder, database, lambda: calls.append("any")),
    ]
    notifier = DatagramNotifier(folder)
    try:
        notifier.notify(sender="w1")  # the local listeners are called before notify returns
        assert sorted(calls) == ["any", "w2"]
        calls.clear()
        notifier.notify()  # any other writer's wake-up calls every listener
        assert sorted(calls) == ["any", "w1", "w2"]
    finally:
        notifier.close()
        for listener in listeners:
            listener.close()
