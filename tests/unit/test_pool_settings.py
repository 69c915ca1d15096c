"""The pure rule of a pool's limit in force: the code declares, a live override wins until reset."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidegate.domain import pool_settings as rules
from tidegate.domain.pool_settings import PoolRow, PoolSetting

settings = st.builds(PoolSetting, st.integers(0, 50), st.sampled_from([1.0, 60.0, 300.0]))


@given(code=settings, live=settings, again=settings)
def test_an_override_wins_over_any_later_declaration_until_reset(code, live, again) -> None:
    row = rules.override(rules.declare(PoolRow(), code), live)
    row = rules.declare(row, again)
    assert (row.in_force, row.source) == (live, "override")
    reset = rules.reset(row)
    assert (reset.in_force, reset.source) == (again, "code")


@given(code=settings)
def test_a_reset_without_a_declaration_leaves_the_pool_unconfigured(code) -> None:
    row = rules.reset(rules.override(PoolRow(), code))
    assert (row.in_force, row.source) == (None, None)


def test_only_live_changes_and_moves_of_the_value_in_force_are_audited() -> None:
    code = PoolSetting(2, 60.0)
    declared = rules.declare(PoolRow(), code)
    assert rules.change_event("db", declared, rules.declare(declared, code), live=False) is None
    overridden = rules.override(declared, PoolSetting(3, 60.0))
    event = rules.change_event("db", declared, overridden, live=True)
    assert event is not None and (event.metadata["old"], event.metadata["new"], event.metadata["source"]) == (
        2,
        3,
        "override",
    )
    assert rules.change_event("db", overridden, rules.declare(overridden, PoolSetting(9, 60.0)), live=False) is None
