"""Mounting the dashboard: its routers, static files, sign-in, and the live-refresh stream.

Pages refresh themselves by following the API's event stream (`/live/events`,
the same stream as `/api/v1/events/stream`, authorised by the dashboard's
cookie); the browser falls back to a 5 s refresh when the stream is refused.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Annotated

from fastapi import FastAPI, Header, Request
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.responses import RedirectResponse, Response

from tidegate.dashboard import access, limits, overview, pools, queue, runs, schedules, workers
from tidegate.dashboard.access import (
    COOKIE,
    Events,
    Grant,
    LoginRequired,
    ViewerDep,
    Wiring,
    form_of,
    login_url,
    safe_back,
)
from tidegate.dashboard.render import page, redirect, root_of

MAX_EVENT_ID = 2**63 - 1


def install(api: FastAPI, *, grant: Grant, events: Events) -> None:
    api.state.dashboard = Wiring(grant, events)
    api.add_exception_handler(LoginRequired, _to_login)  # type: ignore[arg-type]
    static = files("tidegate.dashboard") / "static"
    api.mount("/static", StaticFiles(directory=str(static)), name="dashboard-static")
    api.add_api_route("/login", _login_page, methods=["GET"], include_in_schema=False)
    api.add_api_route("/login", _login, methods=["POST"], include_in_schema=False)
    api.add_api_route("/logout", _logout, methods=["POST"], include_in_schema=False)
    api.add_api_route("/live/events", _live_events, methods=["GET"], include_in_schema=False)
    for module in (overview, queue, pools, runs, limits, schedules, workers):
        api.include_router(module.router, include_in_schema=False)


async def _to_login(request: Request, error: LoginRequired) -> Response:
    return RedirectResponse(login_url(root_of(request), error.back), status_code=303)


def _login_page(request: Request, next: str = "/") -> Response:
    back = safe_back(next)
    try:
        access.wiring(request).grant(request, None)
    except HTTPException:
        return page(request, "login.html", None, back=back, error=None)
    return RedirectResponse(back, status_code=303)  # no token is needed here: nothing to sign in to


async def _login(request: Request) -> Response:
    form = await form_of(request)
    back = safe_back(form.get("next", "/"))
    token = form.get("token", "").strip()
    try:
        access.wiring(request).grant(request, token or None)
    except HTTPException as refused:
        if refused.status_code == 429:  # too many wrong tokens from this address: say when to try again
            answer = page(request, "login.html", None, status_code=429, back=back, error=f"Refused: {refused.detail}.")
            answer.headers.update(refused.headers or {})
            return answer
        return page(request, "login.html", None, status_code=401, back=back, error="That token is not valid here.")
    response = RedirectResponse(back, status_code=303)
    secure = request.url.scheme == "https"
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict", secure=secure, path="/")
    return response


async def _logout(request: Request) -> Response:
    response = redirect(request, "/login")
    response.delete_cookie(COOKIE, path="/")
    return response


async def _live_events(
    request: Request,
    viewer: ViewerDep,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> Response:
    wired: Wiring = request.app.state.dashboard
    after = int(last_event_id) if last_event_id and last_event_id.isascii() and last_event_id.isdigit() else None
    return await wired.events(request, None if after is None else min(after, MAX_EVENT_ID), None)
