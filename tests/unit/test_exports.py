"""`tidegate` exports every type its public API takes or gives back.

Starting from `tidegate.__all__`, the test follows each public function,
method, property and annotated attribute to the tidegate types named in its
signature, then does the same for those types, and so on: every tidegate type
a user can be handed or asked for must be importable as `tidegate.X`.
"""

from __future__ import annotations

import enum
import inspect
import typing
from collections.abc import Iterator
from typing import Any

import tidegate
from tidegate.app.handle import RunHandle
from tidegate.app.steps import WorkflowTask
from tidegate.app.submit import TaskOptions
from tidegate.app.tasks import Task
from tidegate.domain.model import LimitChange
from tidegate.storage.port import Store

# Made by the App for the user, never by the user: their constructors are wiring, not API.
BUILT_BY_THE_APP = {Task, WorkflowTask, TaskOptions, RunHandle}


def tidegate_types(hint: Any) -> Iterator[type]:
    """The tidegate classes named by a resolved annotation, through unions and generics."""
    if isinstance(hint, typing.TypeVar):
        if hint.__bound__ is not None:
            yield from tidegate_types(hint.__bound__)
        return
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return
    if origin is not None:
        yield from tidegate_types(origin)
        for argument in typing.get_args(hint):
            yield from tidegate_types(argument)
        return
    if isinstance(hint, type) and hint.__module__.split(".")[0] == "tidegate":
        yield hint


def annotated_callables(cls: type) -> Iterator[tuple[str, Any]]:
    """(name, function) for each public method and property of `cls`, and its constructor."""
    for name in dir(cls):
        if name.startswith("_") and name != "__init__":
            continue
        if name == "__init__" and cls in BUILT_BY_THE_APP:
            continue
        member = inspect.getattr_static(cls, name)
        if isinstance(member, property):
            member = member.fget
        elif isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if inspect.isfunction(member):
            yield name, member


def hints_of(obj: Any) -> dict[str, Any]:
    return typing.get_type_hints(obj, globalns=vars(inspect.getmodule(obj)))


def public_types(obj: Any) -> Iterator[tuple[str, type]]:
    """(where, type) for each tidegate type in the signatures and annotated attributes of `obj`."""
    if inspect.isfunction(obj):
        for hint in hints_of(obj).values():
            yield from ((obj.__qualname__, found) for found in tidegate_types(hint))
        return
    if not isinstance(obj, type) or issubclass(obj, (BaseException, enum.Enum)):
        return
    for attribute, hint in typing.get_type_hints(obj).items():
        if not attribute.startswith("_"):
            yield from ((f"{obj.__qualname__}.{attribute}", found) for found in tidegate_types(hint))
    for name, function in annotated_callables(obj):
        for hint in hints_of(function).values():
            yield from ((f"{obj.__qualname__}.{name}", found) for found in tidegate_types(hint))


def test_every_type_of_the_public_api_is_exported_from_tidegate():
    exported = {getattr(tidegate, name) for name in tidegate.__all__}
    missing: dict[str, str] = {}
    seen: set[Any] = set()
    todo = list(exported)
    while todo:
        obj = todo.pop()
        if obj in seen:
            continue
        seen.add(obj)
        for where, found in public_types(obj):
            if found not in exported:
                missing.setdefault(f"{found.__module__}.{found.__qualname__}", where)
            todo.append(found)
    assert not missing, "not exported from tidegate (type: first seen in): " + ", ".join(
        f"{name} ({where})" for name, where in sorted(missing.items())
    )


def test_all_names_exactly_what_tidegate_exports():
    assert sorted(tidegate.__all__) == tidegate.__all__, "keep __all__ sorted"
    assert all(hasattr(tidegate, name) for name in tidegate.__all__)
    names = vars(tidegate).items()
    public = {name for name, value in names if not name.startswith("_") and not inspect.ismodule(value)}
    assert public == set(tidegate.__all__)


def test_the_walk_finds_a_type_that_is_only_returned():
    """The check above can fail: LimitChange is reached only as a return type (of `App.store`'s
    `set_limit`), three steps from `tidegate.App`."""
    reached = {found for _, found in public_types(Store)}
    assert LimitChange in reached
    assert Store in {found for _, found in public_types(tidegate.App)}
