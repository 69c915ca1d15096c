"""The hand-written reference pages name every setting and event the code has, with its defaults.

A `TIDEGATE_*` variable the code reads, or an event type it writes, that the docs do not list
fails here; so does a default in docs/reference/settings.md that disagrees with the code's table.
"""

from __future__ import annotations

import ast
import re

from tests.docs.examples import REPO_ROOT
from tidegate.domain.jsonvalue import DEFAULT_MAX_PAYLOAD
from tidegate.domain.sizes import format_size
from tidegate.domain.tunables import COUNTS, TUNABLES
from tidegate.storage.urls import DEFAULT_DATABASE

SETTINGS = REPO_ROOT / "docs" / "reference" / "settings.md"
EVENTS = REPO_ROOT / "docs" / "reference" / "events.md"
ROW = re.compile(r"^\| `(TIDEGATE_\w+)` \| ([^|]*) \|", re.MULTILINE)
EVENT_NAME = re.compile(r"^(Run|Step|Pool|Limit|Slot|Child|Capacity|Schedule)[A-Z]\w+$")


def documented_settings() -> dict[str, str]:
    return {name: default.strip() for name, default in ROW.findall(SETTINGS.read_text())}


def settings_in_code() -> set[str]:
    names: set[str] = set()
    scripts = (REPO_ROOT / "scripts").glob("*.sh")
    sources = [*(REPO_ROOT / "src").rglob("*.py"), *scripts, REPO_ROOT / "tests" / "conftest.py"]
    for source in sources:
        names |= set(re.findall(r"\bTIDEGATE_[A-Z][A-Z0-9_]*[A-Z0-9]\b", source.read_text()))
    return names


def test_every_setting_the_code_reads_is_documented() -> None:
    missing = settings_in_code() - set(documented_settings())
    assert not missing, f"not in docs/reference/settings.md: {sorted(missing)}"


def test_documented_defaults_are_the_codes() -> None:
    documented = documented_settings()
    for name, tunable in TUNABLES.items():
        if tunable.default:
            assert documented[name] == f"`{tunable.default}`", name
    for name, count in COUNTS.items():
        assert documented[name] == f"`{count.default}`", name
    assert documented["TIDEGATE_DATABASE"] == f"`{DEFAULT_DATABASE}`"
    assert documented["TIDEGATE_MAX_PAYLOAD"] == f"`{format_size(DEFAULT_MAX_PAYLOAD)}`"


def events_in_code() -> set[str]:
    """Every event type string in the domain's events and model modules (calls, tables, enums)."""
    names: set[str] = set()
    for module in ("events.py", "model.py"):
        tree = ast.parse((REPO_ROOT / "src" / "tidegate" / "domain" / module).read_text())
        names |= {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and EVENT_NAME.match(node.value)
        }
    return names


def test_every_event_the_code_writes_is_documented() -> None:
    documented = set(re.findall(r"^\| `(\w+)` \|", EVENTS.read_text(), re.MULTILINE))
    found = events_in_code()
    assert len(found) >= 20, found  # the scan itself works
    assert not found - documented, f"not in docs/reference/events.md: {sorted(found - documented)}"
    assert not documented - found, f"documented but never written: {sorted(documented - found)}"
