"""`/api/v1/pools`: each pool's limit, lease and usage, one pool's holders, and a live change.

Usage is the sum of the holder rows, read from the store, so what these
routes show is what every claimer judges by. Changes go through the same
validation as `App.set_pool_limit` and `tidegate pools set`
(`engine.pool_config`), audited as a LimitChanged.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request

from tidegate.api import control_schemas as schemas
from tidegate.api.errors import blame
from tidegate.api.routing import ERRORS, PREFIX, app_of, not_found
from tidegate.api.security import can_read, can_write, json_body
from tidegate.domain.errors import PoolNotFound
from tidegate.domain.pools import check_pool_limit, check_pool_name
from tidegate.domain.steps import PoolStatus
from tidegate.domain.tunables import DEFAULT_POOL_LEASE
from tidegate.engine.pool_config import check_lease, reset_pool_limit, set_pool_limit
from tidegate.storage.port import Store

router = APIRouter(prefix=PREFIX, tags=["pools"])
PoolName = Annotated[str, Path(description="The pool's name.", max_length=200)]
_ONE = {**ERRORS, **not_found("pool")}


def _find(store: Store, name: str) -> PoolStatus | None:
    with blame("name"):
        check_pool_name(name)  # a name no pool can have is refused before it reaches SQL
    return next((status for status in store.pools() if status.name == name), None)


@router.get("/pools", response_model=schemas.PoolList, responses=ERRORS, dependencies=[can_read], summary="List pools")
def list_pools(request: Request) -> dict[str, Any]:
    return {"pools": [status.document() for status in app_of(request).store.pools()]}


@router.get(
    "/pools/{name}", response_model=schemas.PoolDetail, responses=_ONE, dependencies=[can_read],
    summary="Show a pool and the holders of its slots",
)  # fmt: skip
def show_pool(name: PoolName, request: Request) -> dict[str, Any]:
    store = app_of(request).store
    status = _find(store, name)
    if status is None:
        raise PoolNotFound(f"no pool named {name!r}: configure it with PUT /api/v1/pools/{name}")
    return {**status.document(), "holders": [holder.document() for holder in store.pool_holders(name)]}


@router.put(
    "/pools/{name}", response_model=schemas.Pool, responses=ERRORS, dependencies=[can_write, json_body],
    summary="Create a pool or change its limit and lease, live",
)  # fmt: skip
def update_pool(name: PoolName, body: schemas.PoolUpdate, request: Request) -> dict[str, Any]:
    store = app_of(request).store
    before = _find(store, name)
    lease: str | float = DEFAULT_POOL_LEASE if body.lease_duration is None else body.lease_duration
    if body.lease_duration is None and before is not None and before.lease_seconds is not None:
        lease = before.lease_seconds  # a PUT without a lease keeps the pool's own
    with blame("limit"):
        check_pool_limit(body.limit)
    with blame("lease_duration"):
        check_lease(lease)
    config = set_pool_limit(store, name, body.limit, lease)
    after = _find(store, config.name)
    assert after is not None  # just configured
    return after.document()


@router.delete(
    "/pools/{name}/override", response_model=schemas.Pool, responses=_ONE, dependencies=[can_write],
    summary="Drop a pool's live override: the code's limit is in force again (none: unconfigured)",
)  # fmt: skip
def reset_pool(name: PoolName, request: Request) -> dict[str, Any]:
    store = app_of(request).store
    if _find(store, name) is None:
        raise PoolNotFound(f"no pool named {name!r}")
    reset_pool_limit(store, name)
    after = _find(store, name)
    return (after if after is not None else PoolStatus(name, None, None, 0, 0)).document()
