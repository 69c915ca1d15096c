"""The one rule for a run's args (domain/parameters.py): described from a function, checked by name and JSON type.

Properties: on names the rule agrees with a Python call by name (as the worker calls),
so it never refuses a call the function would take, nor lets through one it would
refuse; on types it agrees with an independent table of what each annotation
allows; a description survives its JSON round trip through the store.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, NewType, Optional, TypedDict, TypeVar, Union

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate import ArgumentMismatch, InvalidArgument, TidegateError
from tidegate.domain.parameters import ANY, TaskParameters, check_args, describe, describe_signature, json_types

P = inspect.Parameter
NAMES = ["a", "b", "c", "d", "e", "f"]

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def signatures(draw: st.DrawFn) -> inspect.Signature:
    """A valid signature over some of NAMES: positional-only, then positional-or-keyword, then
    keyword-only parameters, defaults only after the required positional ones, maybe **kwargs."""
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=len(NAMES)))
    kinds = sorted(draw(st.lists(st.sampled_from([0, 1, 2]), min_size=len(names), max_size=len(names))))
    kind_of = [P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY]
    parameters = []
    defaulted = False
    for name, kind in zip(names, kinds, strict=True):
        has_default = draw(st.booleans()) or (defaulted and kind < 2)
        defaulted = defaulted or (has_default and kind < 2)
        parameters.append(P(name, kind_of[kind], default=0 if has_default else P.empty))
    if draw(st.booleans()):
        parameters.append(P("rest", P.VAR_KEYWORD))
    return inspect.Signature(parameters)


@settings(max_examples=300)
@given(signature=signatures(), given_names=st.lists(st.sampled_from([*NAMES, "z", "rest"]), unique=True))
def test_names_agree_with_a_python_call_by_name(signature: inspect.Signature, given_names: list[str]) -> None:
    """The oracle is a real call, as the worker makes it (`Signature.bind` differs: it refuses a
    positional-only name that **kwargs would take)."""
    namespace: dict[str, Any] = {}
    exec(f"def function{signature}: return None", namespace)
    args = dict.fromkeys(given_names, 1)
    try:
        namespace["function"](**args)
        python_takes_it = True
    except TypeError:
        python_takes_it = False
    try:
        check_args("t.f", describe_signature(signature, {}), args)
        rule_takes_it = True
    except ArgumentMismatch:
        rule_takes_it = False
    assert rule_takes_it == python_takes_it, (signature, args)


class Point(TypedDict):
    x: int


UserId = NewType("UserId", int)
Number = TypeVar("Number", int, float)
Bounded = TypeVar("Bounded", bound=str)


class Custom:
    """A class of the user's own: JSON cannot say what fits it."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return _is_int(value) or isinstance(value, float)


# (annotation, what it allows), written independently of the rule's own table.
TABLE: list[tuple[Any, Any]] = [
    (int, _is_int),
    (float, _is_number),
    (str, lambda v: isinstance(v, str)),
    (bool, lambda v: isinstance(v, bool)),
    (list, lambda v: isinstance(v, list)),
    (list[int], lambda v: isinstance(v, list)),
    (tuple[int, str], lambda v: isinstance(v, list)),
    (Sequence[str], lambda v: isinstance(v, list)),
    (set[int], lambda v: isinstance(v, list)),
    (dict, lambda v: isinstance(v, dict)),
    (dict[str, int], lambda v: isinstance(v, dict)),
    (Mapping[str, Any], lambda v: isinstance(v, dict)),
    (Point, lambda v: isinstance(v, dict)),
    (None, lambda v: v is None),
    (Optional[int], lambda v: v is None or _is_int(v)),  # noqa: UP045 (the old spelling is what is tested)
    (int | None, lambda v: v is None or _is_int(v)),
    (Union[str, list[str]], lambda v: isinstance(v, (str, list))),  # noqa: UP007
    (str | bool, lambda v: isinstance(v, (str, bool))),
    (Literal["a", 3], lambda v: isinstance(v, str) or _is_int(v)),
    (Annotated[int, "meta"], _is_int),
    (UserId, _is_int),
    (Number, _is_number),
    (Bounded, lambda v: isinstance(v, str)),
    (Any, lambda v: True),
    (object, lambda v: True),
    (int | Any, lambda v: True),
    (Custom, lambda v: True),
    (bytes, lambda v: True),
    (P.empty, lambda v: True),
    ("NotResolvable", lambda v: True),
]


ONE_OF_EACH_JSON_TYPE = [None, True, False, 0, 7, 1.5, "s", "", [], [1], {}, {"k": 1}]


@pytest.mark.parametrize("entry", TABLE, ids=lambda entry: str(entry[0]))
@pytest.mark.parametrize("value", ONE_OF_EACH_JSON_TYPE, ids=repr)
def test_each_annotation_against_a_value_of_each_json_type(entry: Any, value: Any) -> None:
    _accepted_as_the_table_says(entry, value)


@settings(max_examples=500)
@given(entry=st.sampled_from(TABLE), value=JSON)
def test_a_value_is_accepted_exactly_when_its_annotation_allows_its_json_type(entry: Any, value: Any) -> None:
    _accepted_as_the_table_says(entry, value)


def _accepted_as_the_table_says(entry: Any, value: Any) -> None:
    annotation, allows = entry
    signature = inspect.Signature([P("x", P.KEYWORD_ONLY, annotation=annotation)])
    try:
        check_args("t.f", describe_signature(signature, {"x": annotation}), {"x": value})
        accepted = True
    except ArgumentMismatch as error:
        accepted = False
        assert error.argument == "x"
        assert "argument 'x' must be" in str(error)
    assert accepted == allows(value), (annotation, value)


@given(signature=signatures())
def test_a_description_survives_its_json_round_trip(signature: inspect.Signature) -> None:
    described = describe_signature(signature, dict.fromkeys(signature.parameters, int))
    stored = json.loads(json.dumps(described.to_json()))
    assert TaskParameters.from_json(stored) == described


def test_nothing_stored_means_no_description_and_an_unknown_type_accepts_anything():
    assert TaskParameters.from_json(None) is None
    newer = {"parameters": [{"name": "x", "required": True, "types": ["integer", "decimal"]}]}
    described = TaskParameters.from_json(newer)
    assert described is not None
    assert described.items[0].types == {ANY}
    check_args("t.f", described, {"x": "12.5"})
    assert TaskParameters.from_json({"parameters": [{"name": "x", "kind": "variadic_from_the_future"}]}) is None
    assert TaskParameters.from_json({"parameters": [{"required": True}]}) is None


def add(x: int, y: int, *, note: str | None = None) -> int:
    return x + y


def test_each_problem_is_named_with_the_task():
    described = describe(add)
    with pytest.raises(ArgumentMismatch, match=r"^tasks\.add: unknown argument 'z' \(known: x, y, note\)$") as error:
        check_args("tasks.add", described, {"x": 1, "y": 2, "z": 3})
    assert (error.value.task, error.value.argument) == ("tasks.add", "z")
    with pytest.raises(ArgumentMismatch, match=r"^tasks\.add: missing required argument 'y'$"):
        check_args("tasks.add", described, {"x": 1})
    with pytest.raises(ArgumentMismatch, match=r"^tasks\.add: argument 'x' must be an integer, got string$"):
        check_args("tasks.add", described, {"x": "1", "y": 2})
    with pytest.raises(ArgumentMismatch, match=r"argument 'note' must be a string or null, got integer"):
        check_args("tasks.add", described, {"x": 1, "y": 2, "note": 5})
    assert issubclass(ArgumentMismatch, InvalidArgument) and issubclass(ArgumentMismatch, TidegateError)


def test_every_problem_is_told_at_once_the_first_named_as_the_argument():
    with pytest.raises(ArgumentMismatch) as error:
        check_args("tasks.add", describe(add), {"x": "1", "w": 0})
    assert error.value.argument == "w"
    assert str(error.value) == (
        "tasks.add: unknown argument 'w' (known: x, y, note); argument 'x' must be an integer, got string; "
        "missing required argument 'y'"
    )


def test_the_parameters_the_worker_fills_are_left_out():
    def task(ctx: object, customer_id: int, *extra: int, **options: Any) -> None:
        return None

    described = describe(task, skip={"ctx"})
    assert [parameter.name for parameter in described.items] == ["customer_id"]
    assert described.extra_keywords
    assert described.text() == "customer_id: int, **kwargs"
    check_args("t.task", described, {"customer_id": 3, "anything": [1]})


def test_the_text_reads_like_the_signature():
    def task(a: int, /, b: float = 1.5, *, c: list[str] | None = None, d=None) -> None:
        return None

    assert describe(task).text() == "a: int, /, b: float = 1.5, *, c: list[str] | None = None, d = None"


def test_a_forward_reference_that_cannot_be_resolved_accepts_anything_and_the_others_still_check():
    def task(x: Undefined, y: int) -> None:  # type: ignore[name-defined]  # noqa: F821
        return None

    described = describe(task)
    assert [parameter.types for parameter in described.items] == [{ANY}, {"integer"}]
    assert described.items[0].annotation == "Undefined"
    with pytest.raises(ArgumentMismatch, match="argument 'y' must be an integer"):
        check_args("t.task", described, {"x": object(), "y": "no"})


def test_json_types_of_common_annotations():
    assert json_types(float) == {"number"}
    assert json_types(Optional[list[int]]) == {"array", "null"}  # noqa: UP045
    assert json_types(bool) == {"boolean"}
