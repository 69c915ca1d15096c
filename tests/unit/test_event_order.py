"""`api.gaps.InOrder`: a stream hands out events in id order and waits a moment at a gap.

On PostgreSQL an event with a lower id can commit after one with a higher
id; a stream that skipped the gap would never send the late event. So the
events after a gap wait until it fills, or until it has been open for the
patience (a rolled-back transaction's id never comes).
"""

from __future__ import annotations

from datetime import UTC, datetime

from tidegate.api.gaps import InOrder
from tidegate.domain.model import EventRecord

PATIENCE = 0.5


def _events(*ids: int) -> list[EventRecord]:
    return [EventRecord(id, "run", None, "RunQueued", {}, datetime.now(UTC)) for id in ids]


def test_contiguous_events_go_out_at_once_and_move_the_cursor():
    order = InOrder(cursor=10, patience=PATIENCE)
    assert [event.id for event in order.take(_events(11, 12, 13), now=0.0)] == [11, 12, 13]
    assert order.cursor == 13 and not order.waiting


def test_events_after_a_gap_wait_until_it_fills():
    order = InOrder(cursor=10, patience=PATIENCE)
    assert [event.id for event in order.take(_events(11, 13, 14), now=0.0)] == [11]
    assert order.cursor == 11 and order.waiting
    assert [event.id for event in order.take(_events(12, 13, 14), now=0.1)] == [12, 13, 14]  # 12 committed late
    assert order.cursor == 14 and not order.waiting


def test_a_gap_open_past_the_patience_is_passed():
    order = InOrder(cursor=10, patience=PATIENCE)
    assert order.take(_events(12, 13), now=0.0) == []
    assert order.take(_events(12, 13), now=PATIENCE - 0.01) == []
    assert [event.id for event in order.take(_events(12, 13), now=PATIENCE)] == [12, 13]
    assert order.cursor == 13 and not order.waiting
