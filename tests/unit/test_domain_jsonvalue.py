"""`ensure_json`: only plain JSON crosses the store, and a bad value is reported by its path."""

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegate import InvalidArgument
from tidegate.domain import jsonvalue
from tidegate.domain.jsonvalue import dumps, ensure_json

# Storable text: no NUL (PostgreSQL refuses it), no lone surrogate (not Unicode text).
storable = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
texts = st.text(storable, max_size=20)
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | texts
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(storable, max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
bad_leaves = st.sampled_from(
    [set(), {1, 2}, frozenset(), b"bytes", bytearray(b"x"), float("nan"), float("inf"), float("-inf"), object(), 1j]
)


@given(json_values)
def test_generated_json_is_accepted_and_serializable(value):
    ensure_json(value, "root")
    assert json.loads(dumps(value)) == json.loads(json.dumps(value))


@given(json_values)
def test_the_stored_text_is_the_standard_encoder_s(value):
    """`dumps` drives json's C encoder directly (built once): its text must stay exactly the
    standard encoder's with the same options, byte for byte, so stored rows never change shape."""
    reference = json.JSONEncoder(separators=(",", ":"), sort_keys=True, allow_nan=False)
    assert dumps(value) == reference.encode(value)


def test_without_the_c_accelerator_the_standard_encoder_writes_the_same(monkeypatch):
    value = {"b": [1, 2.5, None, True], "a": "\u00e9t\u00e9", "c": {"z": 1, "y": 2}}
    fast = dumps(value)
    monkeypatch.setattr(jsonvalue, "_C_ENCODE", None)
    assert dumps(value) == fast


@pytest.mark.parametrize("bad", [float("nan"), [float("-inf")], {"key": object()}, {(1,): 2}])
def test_the_encoder_refuses_what_the_standard_one_refuses(bad):
    reference = json.JSONEncoder(separators=(",", ":"), sort_keys=True, allow_nan=False)
    with pytest.raises((ValueError, TypeError)) as expected:
        reference.encode(bad)
    with pytest.raises(expected.type, match=str(expected.value).split(":")[0]):
        dumps(bad)


@st.composite
def nested_bad(draw):
    """A JSON value with one bad leaf somewhere inside, and the path ensure_json must report."""
    bad = draw(bad_leaves)
    value, path = bad, "root"
    steps = []
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        if draw(st.booleans()):
            siblings = draw(st.lists(json_values, max_size=3))
            index = draw(st.integers(min_value=0, max_value=len(siblings)))
            steps.append(("list", index, siblings))
        else:
            siblings = draw(st.dictionaries(st.text(storable, max_size=6), json_values, max_size=3))
            key = draw(st.text(storable, max_size=6).filter(lambda k, s=siblings: k not in s))
            steps.append(("dict", key, siblings))
    for kind, where, siblings in steps:
        if kind == "list":
            container = list(siblings)
            container.insert(where, value)
        else:
            container = dict(siblings)
            container[where] = value
        value = container
    for kind, where, _ in reversed(steps):
        path += f"[{where!r}]" if kind == "dict" else f"[{where}]"
    return value, path, bad


@given(nested_bad())
def test_a_bad_value_nested_anywhere_is_rejected_naming_its_path(case):
    value, path, bad = case
    with pytest.raises(InvalidArgument) as caught:
        ensure_json(value, "root")
    message = str(caught.value)
    assert message.startswith(path + ":"), (message, path)
    if isinstance(bad, float):
        assert not math.isfinite(bad)
        assert "JSON number" in message
    else:
        assert type(bad).__name__ in message


@given(json_values, st.one_of(st.integers(), st.none(), st.booleans(), st.tuples(st.integers())))
def test_non_string_keys_are_rejected(value, key):
    with pytest.raises(InvalidArgument, match="not a string"):
        ensure_json({"outer": {key: value}}, "root")


def test_tuples_count_as_arrays():
    ensure_json((1, [2, (3,)]), "root")
