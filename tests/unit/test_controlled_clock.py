"""The test clock of tidegate.testing: advanced by human durations, frozen, resumed, never back."""

from __future__ import annotations

import time

import pytest

from tidegate import App, ConfigurationError
from tidegate.app.settings import default_clock, using_clock
from tidegate.domain.clock import SYSTEM_CLOCK
from tidegate.testing import ControlledClock


def test_advance_takes_human_durations() -> None:
    clock = ControlledClock()
    before_wall, before_monotonic = clock.wall(), clock.monotonic()
    clock.advance("2h")
    clock.advance(30)
    assert clock.wall() - before_wall >= 7230
    assert clock.monotonic() - before_monotonic >= 7230
    assert clock.offset == pytest.approx(7230, abs=0.5)


@pytest.mark.parametrize("bad", ["-1s", "soon", -5, True])
def test_advance_refuses_what_is_no_forward_duration(bad: object) -> None:
    clock = ControlledClock()
    with pytest.raises(ConfigurationError, match="advance"):
        clock.advance(bad)  # type: ignore[arg-type]
    assert clock.offset < 1


def test_freeze_stops_the_wall_only_and_resume_never_goes_back() -> None:
    clock = ControlledClock()
    frozen = clock.freeze().wall()
    monotonic = clock.monotonic()
    time.sleep(0.02)
    assert clock.frozen and clock.wall() == frozen
    assert clock.monotonic() > monotonic  # waits inside the process still end
    clock.advance("1m")
    assert clock.wall() == frozen + 60
    clock.resume()
    assert not clock.frozen
    assert clock.wall() >= frozen + 60
    later = clock.monotonic()
    assert later >= monotonic + 60


def test_apps_built_while_a_clock_is_in_use_read_it(tmp_path) -> None:
    clock = ControlledClock()
    with using_clock(clock):
        assert App(f"sqlite:///{tmp_path}/a.db").clock is clock
        assert App(f"sqlite:///{tmp_path}/b.db", clock=SYSTEM_CLOCK).clock is SYSTEM_CLOCK
    assert default_clock() is SYSTEM_CLOCK
    assert App(f"sqlite:///{tmp_path}/c.db").clock is SYSTEM_CLOCK


def test_a_worker_refuses_an_unknown_drain_mode(tmp_path) -> None:
    app = App(f"sqlite:///{tmp_path}/t.db")

    @app.task(name="noop")
    def noop() -> None: ...

    with pytest.raises(ConfigurationError, match="drain must be True, False or 'due', got 'sometimes'"):
        app.worker(drain="sometimes")  # type: ignore[arg-type]
