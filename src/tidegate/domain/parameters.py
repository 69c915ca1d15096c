"""A task's parameters as data, and the one check of a run's args against them.

A run's args are a JSON object passed to the task by name, so what a submit
can get wrong is: a name the function does not take, a required one left
out, or a value whose JSON type the annotation does not allow. The function
is described once (`describe`) where its code is imported; the description is
stored with the task's defaults, so a process without the code (the CLI, a
server without MODULE:APP) checks a submit by name exactly as the app would
(`check_args`), and refuses before anything is stored instead of failing
the run after its retries.

Annotations map to JSON types leniently: what cannot be judged from JSON (an
unannotated parameter, `Any`, a class of the user's own, an unresolvable
forward reference) accepts any value; the check never refuses what the
function could take.
"""

from __future__ import annotations

import collections.abc
import enum
import inspect
import types
import typing
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tidegate.domain.errors import ArgumentMismatch

ANY = "any"  # the annotation does not restrict the value's JSON type
JSON_TYPES = ("boolean", "integer", "number", "string", "array", "object", "null")  # null last in messages
_ARTICLE = {"integer": "an integer", "array": "an array", "object": "an object", "null": "null"}
_DEFAULT_TEXT = 40  # characters of a default's repr kept for people to read


class ParameterKind(str, enum.Enum):
    """How Python binds the parameter; a run's args are always given by name."""

    POSITIONAL_ONLY = "positional_only"  # cannot be given by name: a required one can never be filled
    POSITIONAL_OR_KEYWORD = "positional_or_keyword"
    KEYWORD_ONLY = "keyword_only"


_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: ParameterKind.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD: ParameterKind.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.KEYWORD_ONLY: ParameterKind.KEYWORD_ONLY,
}


@dataclass(frozen=True)
class TaskParameter:
    name: str
    required: bool
    types: frozenset[str]  # JSON types accepted; {ANY} when the annotation does not restrict them
    kind: ParameterKind = ParameterKind.POSITIONAL_OR_KEYWORD
    annotation: str = ""  # as written in the code, for people
    default: str | None = None  # the default's repr (shortened), for people; None when required

    def accepts(self, value: Any) -> bool:
        if ANY in self.types:
            return True
        found = json_type_of(value)
        return found in self.types or (found == "integer" and "number" in self.types)

    def text(self) -> str:
        """`x: int`, `y: int = 2`, `z`: the parameter as its signature shows it."""
        head = f"{self.name}: {self.annotation}" if self.annotation else self.name
        return head if self.default is None else f"{head} = {self.default}"


@dataclass(frozen=True)
class TaskParameters:
    """Every parameter a run's args may fill, in signature order; `extra_keywords`: it takes **kwargs."""

    items: tuple[TaskParameter, ...] = ()
    extra_keywords: bool = False

    @property
    def names(self) -> list[str]:
        return [parameter.name for parameter in self.items if parameter.kind is not ParameterKind.POSITIONAL_ONLY]

    def text(self) -> str:
        """`x: int, y: int = 2, *, z: str, **kwargs`: the signature as a task list shows it."""
        parts: list[str] = []
        kinds = [parameter.kind for parameter in self.items]
        for index, parameter in enumerate(self.items):
            if parameter.kind is ParameterKind.KEYWORD_ONLY and ParameterKind.KEYWORD_ONLY not in kinds[:index]:
                parts.append("*")
            parts.append(parameter.text())
            if (
                parameter.kind is ParameterKind.POSITIONAL_ONLY
                and ParameterKind.POSITIONAL_ONLY not in kinds[index + 1 :]
            ):
                parts.append("/")
        if self.extra_keywords:
            parts.append("**kwargs")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        """The description as stored with the task (a JSON object)."""
        return {
            "parameters": [
                {
                    "name": parameter.name,
                    "kind": parameter.kind.value,
                    "required": parameter.required,
                    "types": sorted(parameter.types),
                    "annotation": parameter.annotation,
                    "default": parameter.default,
                }
                for parameter in self.items
            ],
            "extra_keywords": self.extra_keywords,
        }

    @classmethod
    def from_json(cls, value: Any) -> TaskParameters | None:
        """A stored description; None when there is none (registered before descriptions were stored).

        A type name this version does not know (written by a newer one) accepts any value:
        the check may let through what a newer tidegate would refuse, never the reverse.
        """
        if not isinstance(value, Mapping) or not isinstance(value.get("parameters"), list):
            return None
        try:
            items = tuple(_parameter_from_json(entry) for entry in value["parameters"])
        except (KeyError, TypeError, ValueError, AttributeError):  # a shape this version cannot read
            return None  # not checked, rather than refusing what the task may take
        return cls(items, bool(value.get("extra_keywords")))


def _parameter_from_json(entry: Mapping[str, Any]) -> TaskParameter:
    names = frozenset(str(name) for name in entry.get("types") or (ANY,))
    default = entry.get("default")
    return TaskParameter(
        name=str(entry["name"]),
        required=bool(entry.get("required")),
        types=names if names <= {*JSON_TYPES, ANY} else frozenset({ANY}),
        kind=ParameterKind(entry.get("kind", ParameterKind.POSITIONAL_OR_KEYWORD.value)),
        annotation=str(entry.get("annotation") or ""),
        default=None if default is None else str(default),
    )


def describe(fn: Callable[..., Any], skip: Collection[str] = ()) -> TaskParameters:
    """The parameters of `fn` a run's args fill; `skip` names those the worker fills itself
    (a `tidegate.Context`, a workflow's builder)."""
    signature = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # one unresolvable annotation: resolve the others one by one
        namespace = getattr(fn, "__globals__", {})
        hints = {name: _resolve(p.annotation, namespace) for name, p in signature.parameters.items()}
    return describe_signature(signature, hints, skip)


def _resolve(annotation: Any, namespace: Mapping[str, Any]) -> Any:
    if not isinstance(annotation, str):
        return annotation
    try:
        return eval(annotation, dict(namespace))  # what get_type_hints does, for one annotation
    except Exception:
        return inspect.Parameter.empty  # cannot be resolved here: any value


def describe_signature(
    signature: inspect.Signature, hints: Mapping[str, Any], skip: Collection[str] = ()
) -> TaskParameters:
    """`describe` without the function: a signature and its resolved annotations (missing: as written)."""
    items = []
    extra = False
    for name, parameter in signature.parameters.items():
        if name in skip or parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            continue  # filled by the worker, or never by name
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            extra = True
            continue
        required = parameter.default is inspect.Parameter.empty
        items.append(
            TaskParameter(
                name=name,
                required=required,
                types=json_types(hints.get(name, parameter.annotation)),
                kind=_KINDS[parameter.kind],
                annotation=_annotation_text(parameter.annotation),
                default=None if required else _shorten(repr(parameter.default)),
            )
        )
    return TaskParameters(tuple(items), extra)


def _annotation_text(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty:
        return ""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    return text.replace("typing.", "")


def _shorten(text: str) -> str:
    return text if len(text) <= _DEFAULT_TEXT else text[: _DEFAULT_TEXT - 1] + "…"


_ANY = frozenset({ANY})
_ARRAYS = (list, tuple, set, frozenset, collections.abc.Sequence, collections.abc.Set)
_CLASSES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "boolean"),  # before int: a bool is an int to Python, not to JSON
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    ((bytes, bytearray), ANY),  # a Sequence JSON cannot carry: not judged
    (collections.abc.Mapping, "object"),
    (_ARRAYS, "array"),
)


def json_types(annotation: Any) -> frozenset[str]:
    """The JSON types a value for `annotation` may have ({ANY}: any value)."""
    if annotation is None or annotation is type(None):
        return frozenset({"null"})
    origin = typing.get_origin(annotation)
    composed = _composed(origin, typing.get_args(annotation))
    if composed is not None:
        return composed
    if isinstance(annotation, typing.TypeVar):
        return _type_var(annotation)
    if hasattr(annotation, "__supertype__"):  # typing.NewType
        return json_types(annotation.__supertype__)
    if typing.is_typeddict(annotation):
        return frozenset({"object"})
    kind = origin if isinstance(origin, type) else annotation
    if not isinstance(kind, type) or kind is object:
        return _ANY  # Any, unannotated, a string left unresolved, a special form
    for classes, name in _CLASSES:
        if issubclass(kind, classes):
            return frozenset({name})
    return _ANY  # a class of the user's own: JSON cannot say


def _composed(origin: Any, arguments: tuple[Any, ...]) -> frozenset[str] | None:
    """`Annotated[T, ...]`, a union (`Optional`, `X | None`) or a `Literal`; None for anything else."""
    if origin is typing.Annotated:
        return json_types(arguments[0])
    if origin is typing.Union or origin is types.UnionType:
        return _union(json_types(member) for member in arguments)
    if origin is typing.Literal:
        return frozenset(json_type_of(value) for value in arguments)
    return None


def _union(members: Iterable[frozenset[str]]) -> frozenset[str]:
    allowed = frozenset().union(*members)
    return _ANY if ANY in allowed else allowed


def _type_var(variable: typing.TypeVar) -> frozenset[str]:
    if variable.__bound__ is not None:
        return json_types(variable.__bound__)
    if variable.__constraints__:
        return _union(json_types(member) for member in variable.__constraints__)
    return _ANY


def json_type_of(value: Any) -> str:
    """The JSON type of a value as args carry it (Python's json: tuples are arrays)."""
    if value is None:
        return "null"
    for classes, name in (
        (bool, "boolean"),
        (int, "integer"),
        (float, "number"),
        (str, "string"),
        ((list, tuple), "array"),
        (Mapping, "object"),
    ):
        if isinstance(value, classes):
            return name
    return type(value).__name__


def check_args(task: str, parameters: TaskParameters, args: Mapping[str, Any]) -> None:
    """Raise `ArgumentMismatch` naming `task` and every problem unless `args` can call it by name."""
    problems: list[tuple[str, str]] = []  # (argument, problem)
    by_name = {parameter.name: parameter for parameter in parameters.items}
    for name in args:
        parameter = by_name.get(name)
        if parameter is not None and parameter.kind is ParameterKind.POSITIONAL_ONLY and not parameters.extra_keywords:
            problems.append((name, f"argument {name!r} is positional-only: a run's args are given by name"))
        elif parameter is None and not parameters.extra_keywords:
            known = ", ".join(parameters.names) or "none"  # only for the message: a submit's hot path
            problems.append((name, f"unknown argument {name!r} (known: {known})"))
    for parameter in parameters.items:
        given = parameter.name in args and parameter.kind is not ParameterKind.POSITIONAL_ONLY
        if parameter.required and not given:
            problems.append((parameter.name, f"missing required argument {parameter.name!r}"))
        elif given and not parameter.accepts(args[parameter.name]):
            found = json_type_of(args[parameter.name])
            problems.append(
                (parameter.name, f"argument {parameter.name!r} must be {_expected(parameter)}, got {found}")
            )
    if problems:
        raise ArgumentMismatch(task, problems[0][0], "; ".join(problem for _, problem in problems))


def _expected(parameter: TaskParameter) -> str:
    names = [name for name in JSON_TYPES if name in parameter.types]
    return " or ".join(_ARTICLE.get(name, f"a {name}") for name in names)
