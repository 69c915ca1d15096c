"""Every verb of the Store port is called by the conformance suite.

The suite is the `test_*_contract.py` modules of this folder. A verb added to
`storage/port.py` without a contract test that calls it (`store.VERB(...)`)
fails here, so no verb can land on one adapter's word alone. The scan reads
the modules' source (it runs nothing), so it holds even when only part of
the suite is selected.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tidegate.storage.port import VERBS

SUITE = Path(__file__).parent


def port_verbs() -> set[str]:
    return set(VERBS)


def verbs_called_by_module() -> dict[str, set[str]]:
    """The port verbs each contract module calls on a variable named `store`."""
    called: dict[str, set[str]] = defaultdict(set)
    for module in sorted(SUITE.glob("test_*_contract.py")):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "store"
            ):
                called[module.name].add(node.func.attr)
    return called


def test_the_port_has_the_verbs_this_scan_expects():
    assert {"enqueue", "cycle", "sweep", "listen", "close"} <= port_verbs()
    assert "url" not in port_verbs()


def test_every_port_verb_is_called_by_a_contract_module():
    called = verbs_called_by_module()
    covered = set().union(*called.values())
    missing = sorted(port_verbs() - covered)
    assert not missing, (
        f"port verbs no contract module calls (add them to tests/contract/test_*_contract.py): {missing}"
    )
