"""Rows of a keyed submit, shared by both adapters' unique.py: the keys taken and the holders replaced."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tidegate.domain.model import NewRun
from tidegate.domain.unique import Holder


def batch_keys(runs: Sequence[NewRun]) -> list[str]:
    """The distinct keys of a batch, in the order the locks are taken (sorted: no circle of waits)."""
    return sorted({run.unique.key for run in runs if run.unique is not None})


def key_rows(stored: Sequence[NewRun]) -> list[dict[str, Any]]:
    """One row per key the stored runs took (a key appears once: the batch's plan stored one run for it)."""
    return [
        {"key": run.unique.key, "run_id": run.id, "holds": run.unique.holds, "period": run.unique.period}
        for run in stored
        if run.unique is not None
    ]


def replace_params(holder_id: str, run: NewRun) -> dict[str, Any]:
    """`unique_replace`'s parameters (args still a JSON value: each adapter encodes it)."""
    keyed = run.unique
    debounce = keyed is not None and keyed.debounce is not None
    return {
        "id": holder_id,
        "args": run.args,
        "partition": run.partition,
        "rate_key": run.rate_partition,
        "rate_cost": run.rate_cost,
        "debounce": debounce,
        "delay": run.delay,
        "max_wait": None if keyed is None else keyed.max_wait,
    }


def holders_of(rows: Sequence[Sequence[Any]]) -> dict[str, Holder]:
    """`unique_holders` rows (key, run id, status) by key."""
    return {row[0]: Holder(row[1], row[2]) for row in rows}
