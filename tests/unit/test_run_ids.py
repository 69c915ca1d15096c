"""Run ids are ULIDs: the spec's encoding, time-ordered, strictly increasing within a process."""

from __future__ import annotations

import threading
import time

from tidegate.domain.run_ids import encode, new_run_id

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def decode(text: str) -> int:
    value = 0
    for symbol in text:
        value = value * 32 + CROCKFORD.index(symbol)
    return value


def test_the_encoding_is_the_ulid_specs():
    assert encode(0) == "0" * 26
    assert encode(2**128 - 1) == "7" + "Z" * 25  # the largest ULID
    # The spec's example timestamp (1469918176385 ms) is "01ARYZ6S41".
    assert encode(1469918176385 << 80) == "01ARYZ6S41" + "0" * 16
    for value in (1, 31, 32, 1023, 1024, 2**80 - 1, 0x0123456789ABCDEF0123456789ABCDEF):
        assert decode(encode(value)) == value and len(encode(value)) == 26


def test_an_id_holds_the_time_it_was_made_at():
    before = time.time_ns() // 1_000_000
    made = new_run_id()
    after = time.time_ns() // 1_000_000
    assert before <= decode(made) >> 80 <= after
    assert set(made) <= set(CROCKFORD) and len(made) == 26


def test_ids_strictly_increase_even_within_one_millisecond_and_across_threads():
    made: list[list[str]] = [[] for _ in range(4)]

    def make(into: list[str]) -> None:
        into.extend(new_run_id() for _ in range(5000))

    threads = [threading.Thread(target=make, args=(into,)) for into in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for ids in made:
        assert ids == sorted(ids)
    every = [run_id for ids in made for run_id in ids]
    assert len(set(every)) == len(every)
    later = new_run_id()
    assert later > max(every)
