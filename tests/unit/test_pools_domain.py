"""The pure rules of step gates: the all-or-none grant, validation, step keys."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegate import InvalidArgument, PoolRequestTooLarge
from tidegate.domain.pools import (
    check_pool_limit,
    check_request,
    check_step_key,
    decide_grant,
    pool_needs,
    step_key,
)

SCOPES = st.sampled_from(["pool:a", "pool:b", "pool:c", "fanout:r/m"])
limits_st = st.dictionaries(SCOPES, st.one_of(st.none(), st.integers(0, 6)))
needs_st = st.dictionaries(SCOPES, st.integers(1, 4), min_size=1)
used_st = st.dictionaries(SCOPES, st.integers(0, 8))


@given(needs_st, used_st, limits_st, st.data())
def test_grant_is_all_or_none_and_never_exceeds_a_limit(needs, used, limits, data):
    held = {scope: data.draw(st.integers(0, used.get(scope, 0))) for scope in needs}
    blocking = decide_grant(needs, used, limits, held)
    fits = {
        scope: limits.get(scope) is None or used.get(scope, 0) - held[scope] + slots <= limits[scope]
        for scope, slots in needs.items()
    }
    # refused exactly when one scope has no room, and each blocking scope is one without room
    assert (blocking == []) == all(fits.values())
    assert [use.scope for use in blocking] == sorted(scope for scope, ok in fits.items() if not ok)
    for use in blocking:
        assert use.used == used.get(use.scope, 0) - held[use.scope] and use.limit == limits[use.scope]
    if not blocking:  # after the grant no limited scope is over its limit
        for scope, slots in needs.items():
            if limits.get(scope) is not None:
                assert used.get(scope, 0) - held[scope] + slots <= limits[scope]


@given(needs_st, limits_st)
def test_a_request_is_hopeless_only_when_a_positive_limit_is_below_it(needs, limits):
    hopeless = [s for s, n in needs.items() if limits.get(s) is not None and 0 < limits[s] < n]
    if hopeless:
        with pytest.raises(PoolRequestTooLarge):
            check_request(needs, limits)
    else:
        check_request(needs, limits)


@given(needs_st, limits_st)
def test_what_a_step_holds_already_is_always_granted_again(needs, limits):
    fitting = {scope: n for scope, n in needs.items() if limits.get(scope) is None or n <= limits[scope]}
    assert decide_grant(fitting, fitting, limits, fitting) == []


def test_validation_of_pool_requests():
    assert pool_needs({"b": 1, "a": 2}) == {"pool:a": 2, "pool:b": 1}
    for bad in ({"a": 0}, {"a": -1}, {"a": True}, {"a": 1.5}, {"": 1}, {"a b": 1}):
        with pytest.raises(InvalidArgument):
            pool_needs(bad)
    assert check_pool_limit(0) == 0
    for bad in (-1, 1.0, True, "5", None):
        with pytest.raises(InvalidArgument):
            check_pool_limit(bad)


def test_step_keys():
    assert step_key("heavy_query") == "heavy_query"
    assert step_key("heavy_query", 3) == "heavy_query[3]"
    for bad in ("", "a b", "x/y", "f[-1]", "f[01]", "f[3]x"):
        with pytest.raises(InvalidArgument):
            check_step_key(bad)
