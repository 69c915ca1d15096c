"""domain/transitions.py in its own words: the rules the stores apply (issue 11)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidegate.domain import transitions
from tidegate.domain.backpressure import Pace
from tidegate.domain.errors import AdmissionRejected
from tidegate.domain.limits import QueueConfig, RunQueueConfig
from tidegate.domain.scopes import Rules

STATUSES = ["completed", "failed", "canceled", "queued"]


@given(status=st.sampled_from(STATUSES), cancel=st.booleans())
def test_a_requested_cancel_wins_over_a_retry_or_a_failure_only(status, cancel):
    settled = transitions.settle(status, cancel)
    if cancel and status in ("queued", "failed"):
        assert settled == "canceled"
    else:
        assert settled == status


def test_a_failure_with_a_delay_is_retried():
    assert transitions.outcome_status("failed", 1.0) == "queued"
    assert transitions.outcome_status("failed", None) == "failed"
    assert transitions.outcome_status("completed", None) == "completed"


@given(attempt=st.integers(1, 20), max_attempts=st.integers(1, 20))
def test_attempts_are_used_up_at_max_attempts(attempt, max_attempts):
    assert transitions.attempts_left(attempt, max_attempts) == (attempt < max_attempts)


@given(used=st.integers(0, 50), limit=st.one_of(st.none(), st.integers(1, 50)), slots=st.integers(1, 5))
def test_a_scope_has_room_while_what_it_holds_fits_its_limit(used, limit, slots):
    assert transitions.has_room(used, limit, slots) == (limit is None or used + slots <= limit)


def test_the_deadline_text_rounds_half_away_from_zero_as_sql_does():
    assert round(2.5) == 2  # Python rounds half to even; SQL's round(), on both databases, does not
    assert "queued 3s after" in transitions.deadline_error(2.5)
    assert "queued 2s after" in transitions.deadline_error(2.4999)
    assert "queued 4s after" in transitions.deadline_error(3.5)


def test_ceilings_are_checked_all_queues_first_then_in_order_of_appearance():
    rules = Rules(
        run_queue=RunQueueConfig(max_active=10),
        queues={"a": QueueConfig("a", max_active=2), "b": QueueConfig("b", max_active=1), "c": QueueConfig("c")},
    )
    met = transitions.ceilings_met(rules, ["b", "c", "a", "b"])
    assert [(c.queue, c.limit, c.incoming) for c in met] == [(None, 10, 4), ("b", 1, 2), ("a", 2, 1)]
    assert met[1].refuses(0) and not met[2].refuses(1) and met[2].refuses(2)
    refused = met[1].rejection(0, Pace())
    assert isinstance(refused, AdmissionRejected) and (refused.scope, refused.limit) == ("queue b", 1)


def test_only_a_failed_or_canceled_run_may_be_retried_and_it_gets_one_more_attempt():
    statuses = ("queued", "running", "completed", "failed", "canceled")
    assert [status for status in statuses if transitions.may_retry(status)] == ["failed", "canceled"]
    assert transitions.retried_max_attempts(3) == 4
