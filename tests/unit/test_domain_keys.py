"""Stored unique keys never change between versions (domain/keys.py): a key computed differently
after an upgrade would miss its holder, and a duplicate run would be stored beside it."""

from hypothesis import given
from hypothesis import strategies as st

from tidegate.domain.keys import compute_key

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


def test_keys_are_pinned():
    args = {"b": [1, 2.5, None], "a": "é", "c": {"z": True, "y": "x"}}
    assert compute_key("t.pinned", "args", "work", args) == (
        "e097fd16e09d153c5c321923529aba03ef7d50ee2673409d7a9e8fb82c9ac4d6"
    )
    assert compute_key("t.pinned", "key", None, "order-42") == (
        "8fc09b87ddedc9e43c25131ab785f2115b1166c7b58307c68a2e9c0246f8ca8c"
    )


@given(st.dictionaries(st.text(max_size=8), JSON, max_size=5))
def test_the_order_of_args_never_changes_a_key(args):
    backwards = dict(reversed(list(args.items())))
    assert compute_key("t", "args", None, args) == compute_key("t", "args", None, backwards)
