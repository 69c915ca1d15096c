"""The size of every first read a claim plans (`QueuePlan.window`), recorded in order: the margin
tests read from it whether a claim read its margin or just its limit."""

from __future__ import annotations

from typing import Any

from tidegate.domain.claim_plan import QueuePlan


def record_windows(monkeypatch: Any) -> list[int]:
    """Patch `QueuePlan.window` to append each size it returns to the list returned."""
    sizes: list[int] = []
    real = QueuePlan.window

    def window(self: QueuePlan, limit: int, margin: bool = True) -> int:
        sizes.append(real(self, limit, margin))
        return sizes[-1]

    monkeypatch.setattr(QueuePlan, "window", window)
    return sizes
