"""`/api/v1/rates`: named rates (paid by steps with their pool slots), and a live change or reset.

Changes go through the same validation as `App.set_rate_limit` and `tidegate
rates set` (`engine.operators.rate_config`), audited as a LimitChanged on `rate:@NAME`.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request

from tidegate.api import rate_schemas as schemas
from tidegate.api.routing import ERRORS, PREFIX, app_of, not_found
from tidegate.api.security import can_read, can_write, json_body
from tidegate.domain.errors import RateNotFound
from tidegate.engine.operators import rate_config

router = APIRouter(prefix=PREFIX, tags=["rates"])
RateName = Annotated[str, Path(description="The rate's name.", max_length=200)]
_ONE = {**ERRORS, **not_found("rate")}


@router.get(
    "/rates", response_model=schemas.NamedRateList, responses=ERRORS, dependencies=[can_read],
    summary="List named rates",
)  # fmt: skip
def list_rates(request: Request) -> dict[str, Any]:
    return {"rates": [rate.document() for rate in rate_config.list_rates(app_of(request).store)]}


@router.get(
    "/rates/{name}", response_model=schemas.NamedRate, responses=_ONE, dependencies=[can_read],
    summary="Show a named rate",
)  # fmt: skip
def show_rate(name: RateName, request: Request) -> dict[str, Any]:
    rate = rate_config.find_rate(app_of(request).store, name)
    if rate is None:
        raise RateNotFound(name)
    return rate.document()


@router.put(
    "/rates/{name}", response_model=schemas.NamedRate, responses=ERRORS, dependencies=[can_write, json_body],
    summary="Create a named rate or change its window, live",
)  # fmt: skip
def update_rate(name: RateName, body: schemas.NamedRateUpdate, request: Request) -> dict[str, Any]:
    store = app_of(request).store
    changed = rate_config.change_rate_limit(store, name, body.limit, body.per, body.burst)
    after = rate_config.find_rate(store, changed.name)
    assert after is not None  # just set
    return after.document()


@router.delete(
    "/rates/{name}/override", response_model=schemas.NamedRateReset, responses=_ONE, dependencies=[can_write],
    summary="Drop a named rate's live override: the code's windows are in force again (none: the rate is gone)",
)  # fmt: skip
def reset_rate(name: RateName, request: Request) -> dict[str, Any]:
    store = app_of(request).store
    if rate_config.find_rate(store, name) is None:
        raise RateNotFound(name)
    rate_config.reset_rate_limit(store, name)
    after = rate_config.find_rate(store, name)
    return {"rate": None if after is None else after.document()}
