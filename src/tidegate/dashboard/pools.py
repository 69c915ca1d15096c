"""`/pools`: each pool's utilisation, its holders and pending steps; edit a limit and lease (write access);
and the named rates steps pay with their slots (`tidegate rates list`).

Usage is the sum of the holder rows (`Store.pools`, `Store.pool_holders`), what
every claimer judges by; an edit goes through `engine.operators.pool_config`, exactly as
`PUT /api/v1/pools/{name}` and `tidegate pools set` do.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from tidegate.dashboard.access import FormDep, Viewer, ViewerDep
from tidegate.dashboard.render import app_of, now_of, page, redirect
from tidegate.domain.errors import TidegateError
from tidegate.domain.model import HolderRecord
from tidegate.domain.named_rates import label
from tidegate.domain.steps import PoolStatus, PoolWaiter
from tidegate.engine.operators import pool_config, rate_config

router = APIRouter()
NEAR_EXPIRY = 1 / 3  # a lease with less than this share of its duration left is marked near expiry


@dataclass(frozen=True)
class PoolCard:
    status: PoolStatus
    holders: list[HolderRecord]
    waiting: list[PoolWaiter]  # the steps its `pending` counts


def expiry_class(holder: HolderRecord, lease_seconds: float | None, now: datetime) -> str:
    """'late' past expiry, 'near' within the last third of the lease, '' otherwise."""
    left = (holder.expires_at - now).total_seconds()
    if left < 0:
        return "late"
    lease = lease_seconds or (holder.expires_at - holder.claimed_at).total_seconds()
    return "near" if left < lease * NEAR_EXPIRY else ""


@router.get("/pools")
def pools_page(request: Request, viewer: ViewerDep) -> Response:
    return _render(request, viewer)


def _render(request: Request, viewer: Viewer, error: str | None = None) -> Response:
    store = app_of(request).store
    cards = [
        PoolCard(status, pool_config.pool_holders(store, status.name), pool_config.pool_waiters(store, status.name))
        for status in pool_config.list_pools(store)
    ]
    configured = [card.status for card in cards if card.status.limit is not None]
    summary = {
        "pools": len(cards),
        "claimed": sum(card.status.claimed for card in cards),
        "total": sum(status.limit or 0 for status in configured),
        "pending": sum(card.status.pending for card in cards),
    }
    now = now_of(request)
    rates = rate_config.list_rates(store)  # the named rates steps pay with these slots
    return page(
        request, "pools.html", viewer, 200 if error is None else 422, cards=cards, summary=summary,
        expiry=lambda h, s: expiry_class(h, s, now), error=error, rates=rates, rate_label=label,
    )  # fmt: skip


@router.post("/pools/{name}")
async def edit_pool(name: str, request: Request, viewer: ViewerDep, form: FormDep) -> Response:
    store = app_of(request).store

    def work() -> None:
        limit = pool_config.parse_pool_limit(form.get("limit", ""), "limit")
        pool_config.change_pool(store, name, limit, form.get("lease", "").strip() or None)

    try:
        await run_in_threadpool(work)
    except TidegateError as error:
        return await run_in_threadpool(_render, request, viewer, f"pool {name}: {error}")
    return redirect(request, "/pools")
