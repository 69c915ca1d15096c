"""The dashboard's small rules: utilisation colour, relative times, where sign-in may send back to,
lease expiry marks, the per-minute chart, and the form token (tied to the token and the process)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tidegate.dashboard import chart
from tidegate.dashboard.access import Wiring, safe_back
from tidegate.dashboard.pools import expiry_class
from tidegate.dashboard.render import level, percent, relative, when
from tidegate.domain.model import HolderRecord


@pytest.mark.parametrize(
    ("used", "limit", "colour"),
    [(0, 10, "ok"), (5, 10, "ok"), (6, 10, "warn"), (85, 100, "warn"), (86, 100, "full"), (3, 3, "full"),
     (2, 3, "warn"), (1, 3, "ok"), (4, None, "ok"), (0, 0, "full")],
)  # fmt: skip
def test_utilisation_is_green_below_60_yellow_to_85_red_above(used, limit, colour):
    assert level(used, limit) == colour


def test_percent_is_capped_and_unlimited_is_empty():
    assert (percent(3, 3), percent(1, 4), percent(9, 3), percent(2, None)) == (100, 25, 100, 0)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.2, "just now"), (42, "42 s ago"), (61, "1 min ago"), (7200, "2 h ago"), (90_000, "1 d ago"), (-5, "in 5 s")],
)
def test_relative_times_use_the_largest_whole_unit(seconds, text):
    assert relative(seconds) == text


def test_a_time_shows_the_exact_utc_moment_on_hover():
    moment = datetime(2026, 11, 24, 2, 0, 0, tzinfo=UTC)
    html = str(when(moment, moment + timedelta(seconds=90)))
    assert 'title="2026-11-24 02:00:00 UTC"' in html and ">1 min ago<" in html and 'datetime="2026-11-24T02:00' in html


@pytest.mark.parametrize(
    ("asked", "back"),
    [("/queue?queue=a", "/queue?queue=a"), ("//evil.example/x", "/"), ("https://evil.example/", "/"),
     ("/\\evil.example", "/"), ("queue", "/"), ("", "/")],
)  # fmt: skip
def test_sign_in_returns_only_to_a_path_on_this_site(asked, back):
    assert safe_back(asked) == back


def test_a_lease_is_marked_near_in_its_last_third_and_late_past_expiry():
    now = datetime(2026, 11, 24, tzinfo=UTC)

    def holder(left: float) -> HolderRecord:
        return HolderRecord(
            "pool:gpu", "r/s", "r", 1, "w", 1, now - timedelta(seconds=30 - left), now + timedelta(seconds=left)
        )

    assert [expiry_class(holder(left), 30.0, now) for left in (25, 11, 9, -1)] == ["", "", "near", "late"]


def test_the_chart_has_a_bar_per_minute_each_titled_with_its_count():
    svg = str(chart.bars([0, 2, 4], "ended per minute"))
    assert svg.count("<rect") == 3 and 'aria-label="ended per minute"' in svg
    assert "<title>4 ended, this minute</title>" in svg and "<title>0 ended, 2 min ago</title>" in svg


def test_form_tokens_differ_per_token_and_per_process():
    one, other = Wiring(lambda request, token: "write", None), Wiring(lambda request, token: "write", None)  # type: ignore[arg-type]
    assert one.form_token("a") == one.form_token("a") != one.form_token("b")
    assert one.form_token("a") != other.form_token("a")
