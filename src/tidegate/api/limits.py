"""`/api/v1/limits`: the run-level limits in force, live changes (with a dry run), and resets.

The targets, their validation, the dry-run preview and the audit are the
engine's (`engine.operators.limits`), exactly as `tidegate limits list|set|reset` use
them: the two interfaces cannot disagree on what a target means or on what
a change would do.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from tidegate.api import control_schemas as schemas
from tidegate.api.errors import blame
from tidegate.api.routing import ERRORS, PREFIX, declared_store
from tidegate.api.security import can_read, can_write, json_body
from tidegate.domain.model import LimitChange
from tidegate.domain.scopes import check_override_value
from tidegate.engine.operators import limits
from tidegate.engine.operators.limit_table import limit_table

router = APIRouter(prefix=PREFIX, tags=["limits"])


def _changed(change: LimitChange) -> dict[str, Any]:
    return {
        "target": change.target,
        "old": change.old,
        "new": change.new,
        "dry_run": False,
        "version": change.version,
        "unblocked": None,
        "blocked": None,
        "considered": None,
        "waiting": None,
    }


@router.get(
    "/limits", response_model=schemas.Limits, responses=ERRORS, dependencies=[can_read],
    summary="The run-level limits in force, the admission ceilings, and the live overrides",
)  # fmt: skip
def show_limits(request: Request) -> dict[str, Any]:
    table = limit_table(declared_store(request))
    return {
        "limits": [asdict(row) for row in table.limits],
        "ceilings": [asdict(ceiling) for ceiling in table.ceilings],
        "overrides": [asdict(override) for override in table.overrides],
    }


@router.put(
    "/limits", response_model=schemas.LimitResult, responses=ERRORS, dependencies=[can_write, json_body],
    summary="Set a live limit (persisted and audited), or preview it with dry_run",
)  # fmt: skip
def set_limit(body: schemas.LimitUpdate, request: Request) -> dict[str, Any]:
    store = declared_store(request)
    with blame("target"):
        target = limits.check_target(store, body.target)
    with blame("limit"):
        check_override_value(target, body.limit)
    if not body.dry_run:
        return _changed(limits.set_limit(store, target, body.limit))
    preview = limits.preview(store, target, body.limit)
    return {
        "target": preview.target,
        "old": preview.old,
        "new": preview.new,
        "dry_run": True,
        "version": None,
        "unblocked": preview.unblocked,
        "blocked": preview.blocked,
        "considered": preview.considered,
        "waiting": preview.waiting,
    }


@router.delete(
    "/limits", response_model=schemas.LimitResets, responses=ERRORS, dependencies=[can_write],
    summary="Reset a live limit to the code's (every one without a target)",
)  # fmt: skip
def reset_limits(
    request: Request,
    target: Annotated[
        str | None, Query(max_length=1000, description="The target to reset; omitted: every one.")
    ] = None,
) -> dict[str, Any]:
    with blame("target"):
        changes = limits.reset_limits(declared_store(request), target)
    return {"reset": [_changed(change) for change in changes]}
