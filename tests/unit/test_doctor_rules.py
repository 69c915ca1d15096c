"""The doctor's rules (domain/doctor.py), pure: each check's thresholds and what it names."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from tidegate.domain import doctor
from tidegate.domain.doctor import DatabaseFacts, Diagnosis, Finding, Level
from tidegate.domain.model import QueueCounts, WorkerRecord

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
POSTGRES = DatabaseFacts("postgresql", NOW, NOW, 0, None, 100, 3, 10, 9)


def worker(pid: int, live: bool = True, queues: tuple[str, ...] = ("q",)) -> WorkerRecord:
    return WorkerRecord(f"h:{pid}:n{pid}", pid, 4, 0, list(queues), False, NOW, NOW, 0.0, live, 30.0)


def test_clock_skew_thresholds():
    assert doctor.clock(NOW + timedelta(seconds=0.5), NOW).level is Level.PASS
    warned = doctor.clock(NOW - timedelta(seconds=3), NOW)
    assert warned.level is Level.WARN and warned.message.startswith("this host's clock is 3s behind the database's")
    assert doctor.clock(NOW + timedelta(seconds=31), NOW).level is Level.FAIL
    assert doctor.clock(NOW, None).level is Level.PASS  # SQLite: no clock of its own


def test_queues_with_runs_and_no_live_worker():
    queues = {"a": QueueCounts(queued=3), "b": QueueCounts(queued=1), "c": QueueCounts(queued=0)}
    finding = doctor.unserved_queues(
        queues, [worker(1, queues=("b",)), worker(2, live=False, queues=("a",))], frozenset({"a"})
    )
    assert finding == Finding("queues", Level.WARN, "queued runs that no live worker serves: a (3 queued, paused)")


def test_connections_needed_by_the_live_worker_processes():
    two_processes = [worker(1), worker(1), worker(2), worker(3, live=False)]
    passed = doctor.connections(POSTGRES, two_processes)
    assert passed.level is Level.PASS and "2 worker process(es) may open 18 (9 each)" in passed.message
    crowded = doctor.connections(replace(POSTGRES, connections=90), two_processes)
    assert crowded.level is Level.WARN
    small = doctor.connections(replace(POSTGRES, max_connections=20), two_processes)
    assert small.level is Level.FAIL and "raise max_connections" in small.message
    sqlite = DatabaseFacts("sqlite", NOW, None, 0, None)
    assert doctor.connections(sqlite, two_processes).level is Level.PASS


def test_retention_warns_only_past_its_grace():
    week = 7 * 86400.0
    just_due = replace(POSTGRES, prunable=4, oldest_prunable_at=NOW - timedelta(days=7, minutes=30))
    assert doctor.retention(just_due, week).level is Level.PASS  # the sweep prunes in batches: give it time
    late = replace(POSTGRES, prunable=4, oldest_prunable_at=NOW - timedelta(days=9))
    finding = doctor.retention(late, week)
    assert finding.level is Level.WARN and finding.message.startswith(
        "4 finished run(s) kept past the retention (7d), the oldest by 2d"
    )


def test_the_worst_finding_sets_the_level_and_the_exit_code():
    passing = Finding("a", Level.PASS, "")
    assert Diagnosis(()).exit_code == 0
    assert Diagnosis((passing, Finding("b", Level.WARN, ""))).exit_code == 1
    failing = Diagnosis((Finding("c", Level.FAIL, ""), passing, Finding("b", Level.WARN, "")))
    assert failing.level is Level.FAIL and failing.exit_code == 2
    assert failing.document()["level"] == "fail"


def test_long_lists_are_cut_with_a_count():
    finding = doctor.workers([worker(pid) for pid in range(1, 9)])
    assert (
        finding.level is Level.PASS
        and finding.message.startswith("8 live worker(s)")
        and finding.message.endswith("and 3 more")
    )
