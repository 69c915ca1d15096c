"""The events page names every event type the code writes, and no other.

An event type the code writes that docs/reference/events.md does not list fails here, as does a
listed one the code never writes. (The settings page, docs/settings.md, is generated from
`tidegate.domain.tunables` and held to it by tests/unit/test_settings_table.py.)
"""

from __future__ import annotations

import ast
import re

from tests.docs.examples import REPO_ROOT

EVENTS = REPO_ROOT / "docs" / "reference" / "events.md"
EVENT_NAME = re.compile(r"^(Run|Step|Pool|Limit|Slot|Child|Capacity|Schedule)[A-Z]\w+$")


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
