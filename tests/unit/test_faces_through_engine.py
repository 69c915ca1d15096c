"""The faces (CLI, API, dashboard) reach the store only through the engine's operator services.

What an operator sees and does is said once, in `engine/operators/`, so the three faces cannot
drift apart. The other users above the engine hold a store the same way: the demo and the pytest
plugin read through the operator services, a step pod through `engine/runtime/pod_steps`. The
import contract keeps `tidegate.storage` out of them all; this scan keeps them from using a store
verb on the handle they hold (`store.get_run(...)`,
`app.store.cancel_run`, `self._store().events_after` handed to a thread, or a verb of a
variable annotated `Store`). It reads the sources (it runs nothing). Opening and closing the
handle is the composition root's (`bootstrap.open_store`, `contextlib.closing`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import tidegate
from tidegate.storage.port import VERBS

PACKAGE = Path(tidegate.__file__).parent
FACES = ("api", "cli", "dashboard")
ABOVE_THE_ENGINE = (*FACES, "demo", "testing", "steppod.py")  # packages, and a module, holding a store handle


def _store_names(tree: ast.AST) -> set[str]:
    """Names of parameters and variables annotated as a Store (`Store`, `Store | None`, ...)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            name, annotation = node.arg, node.annotation
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name, annotation = node.target.id, node.annotation
        else:
            continue
        if any(isinstance(part, ast.Name) and part.id == "Store" for part in ast.walk(annotation)):
            found.add(name)
    return found


def _reaches_a_store(receiver: ast.expr, typed: set[str]) -> bool:
    """The receiver names a store anywhere in its chain: `store`, `app.store`, `self._store()`."""
    for part in ast.walk(receiver):
        if isinstance(part, ast.Name) and ("store" in part.id.lower() or part.id in typed):
            return True
        if isinstance(part, ast.Attribute) and "store" in part.attr.lower():
            return True
    return False


def store_verbs_used(source: str) -> list[tuple[int, str]]:
    """(line, expression) of every store verb a module uses on a store, called or handed on."""
    tree = ast.parse(source)
    typed = _store_names(tree)
    return sorted(
        (node.lineno, ast.unparse(node))
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in VERBS and _reaches_a_store(node.value, typed)
    )


def _sources(package: Path) -> list[Path]:
    """The Python files of every package (or module) above the engine that holds a store handle."""
    found: list[Path] = []
    for name in ABOVE_THE_ENGINE:
        path = package / name
        assert path.exists(), f"{path} is gone: update ABOVE_THE_ENGINE"
        found.extend([path] if path.is_file() else sorted(path.rglob("*.py")))
    return found


def faces_store_verbs(package: Path = PACKAGE) -> list[str]:
    """Every use of a store verb above the engine under `package`, as `path:line: expression`."""
    return [
        f"{path.relative_to(package)}:{line}: {expression}"
        for path in _sources(package)
        for line, expression in store_verbs_used(path.read_text(encoding="utf-8"))
    ]


def test_the_scan_finds_every_way_a_face_could_reach_a_store_verb():
    source = """
def one(store, app, request, handle: Store, other):
    store.get_run("r")
    app.store.cancel_run("r")
    app_of(request).store.list_schedules()
    to_thread(self._store().events_after, 0, 10)
    handle.rules()
    other.rules()
    runs.cancel_run(store, "r")
    store.url
"""
    found = [expression for _, expression in store_verbs_used(source)]
    assert found == [
        "store.get_run",
        "app.store.cancel_run",
        "app_of(request).store.list_schedules",
        "self._store().events_after",
        "handle.rules",
    ]


def test_the_scan_reads_the_demo_the_plugin_and_the_step_pod_too(tmp_path):
    for name in ABOVE_THE_ENGINE:
        target = tmp_path / name if name.endswith(".py") else tmp_path / name / "module.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("def one(store):\n    store.get_run('r')\n", encoding="utf-8")
    used = faces_store_verbs(tmp_path)
    assert len(used) == len(ABOVE_THE_ENGINE), used
    assert "steppod.py:2: store.get_run" in used


def test_no_face_uses_a_store_verb():
    used = faces_store_verbs()
    assert not used, (
        "a face (or the demo, the plugin, a step pod) uses a store verb: go through an operator service in "
        "tidegate/engine/operators/ or a runtime piece in tidegate/engine/runtime/ (add one if none fits):\n"
        + "\n".join(used)
    )
