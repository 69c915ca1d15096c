"""`/api/v1/pools`: each pool's limit, lease and usage, one pool's holders, and a live change.

Usage is the sum of the holder rows, read from the store, so what these
routes show is what every claimer judges by. Changes go through the same
validation as `App.set_pool_limit` and `tidegate pools set`
(`engine.operators.pool_config`), audited as a LimitChanged.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request

from tidegate.api import control_schemas as schemas
from tidegate.api.routing import ERRORS, PREFIX, app_of, not_found
from tidegate.api.security import can_read, can_write, json_body
from tidegate.domain.errors import PoolNotFound
from tidegate.domain.steps import PoolStatus
from tidegate.engine.operators import pool_config

router = APIRouter(prefix=PREFIX, tags=["pools"])
PoolName = Annotated[str, Path(description="The pool's name.", max_length=200)]
_ONE = {**ERRORS, **not_found("pool")}


@router.get("/pools", response_model=schemas.PoolList, responses=ERRORS, dependencies=[can_read], summary="List pools")
def list_pools(request: Request) -> dict[str, Any]:
    return {"pools": [status.document() for status in pool_config.list_pools(app_of(request).store)]}


@router.get(
    "/pools/{name}", response_model=schemas.PoolDetail, responses=_ONE, dependencies=[can_read],
    summary="Show a pool and the holders of its slots",
)  # fmt: skip
def show_pool(name: PoolName, request: Request) -> dict[str, Any]:
    store = app_of(request).store
    status = pool_config.find_pool(store, name)
    if status is None:
        raise PoolNotFound(f"no pool named {name!r}: configure it with PUT /api/v1/pools/{name}")
    holders = [holder.document() for holder in pool_config.pool_holders(store, name)]
    waiting = [waiter.document() for waiter in pool_config.pool_waiters(store, name)]
    return {**status.document(), "holders": holders, "waiting": waiting}


@router.put(
    "/pools/{name}", response_model=schemas.Pool, responses=ERRORS, dependencies=[can_write, json_body],
    summary="Create a pool or change its limit and lease, live",
)  # fmt: skip
def update_pool(name: PoolName, body: schemas.PoolUpdate, request: Request) -> dict[str, Any]:
    store = app_of(request).store
    change = pool_config.change_pool(store, name, body.limit, body.lease_duration)  # no lease: the pool's own
    after = pool_config.find_pool(store, change.config.name)
    assert after is not None  # just configured
    return after.document()


@router.delete(
    "/pools/{name}/override", response_model=schemas.Pool, responses=_ONE, dependencies=[can_write],
    summary="Drop a pool's live override: the code's limit is in force again (none: unconfigured)",
)  # fmt: skip
def reset_pool(name: PoolName, request: Request) -> dict[str, Any]:
    store = app_of(request).store
    if pool_config.find_pool(store, name) is None:
        raise PoolNotFound(f"no pool named {name!r}")
    pool_config.reset_pool_limit(store, name)
    after = pool_config.find_pool(store, name)
    return (after if after is not None else PoolStatus(name, None, None, 0, 0)).document()
