"""`/pools`: each pool's utilisation, its holders and pending steps; edit a limit and lease (write access).

Usage is the sum of the holder rows (`Store.pools`, `Store.pool_holders`), what
every claimer judges by; an edit goes through `engine.pool_config`, exactly as
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
from tidegate.domain.pools import check_pool_limit, check_pool_name
from tidegate.domain.steps import PoolStatus
from tidegate.domain.tunables import DEFAULT_POOL_LEASE
from tidegate.engine.pool_config import check_lease, set_pool_limit

router = APIRouter()
NEAR_EXPIRY = 1 / 3  # a lease with less than this share of its duration left is marked near expiry


@dataclass(frozen=True)
class PoolCard:
    status: PoolStatus
    holders: list[HolderRecord]


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
    cards = [PoolCard(status, store.pool_holders(status.name)) for status in store.pools()]
    configured = [card.status for card in cards if card.status.limit is not None]
    summary = {
        "pools": len(cards),
        "claimed": sum(card.status.claimed for card in cards),
        "total": sum(status.limit or 0 for status in configured),
        "pending": sum(card.status.pending for card in cards),
    }
    now = now_of(request)
    return page(
        request, "pools.html", viewer, 200 if error is None else 422, cards=cards, summary=summary,
        expiry=lambda h, s: expiry_class(h, s, now), error=error,
    )  # fmt: skip


@router.post("/pools/{name}")
async def edit_pool(name: str, request: Request, viewer: ViewerDep, form: FormDep) -> Response:
    store = app_of(request).store

    def work() -> None:
        check_pool_name(name)
        limit = int(form.get("limit", "").strip())
        check_pool_limit(limit)
        lease = check_lease(form.get("lease", "").strip() or DEFAULT_POOL_LEASE)
        set_pool_limit(store, name, limit, lease)

    try:
        await run_in_threadpool(work)
    except (TidegateError, ValueError) as error:
        message = f"pool {name}: {error}" if isinstance(error, TidegateError) else f"pool {name}: limit is not a number"
        return await run_in_threadpool(_render, request, viewer, message)
    return redirect(request, "/pools")
