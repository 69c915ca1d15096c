"""Pages from templates: one Jinja2 environment (autoescaped), the filters every page shares.

Times are shown relative ("12 s ago") with the exact UTC time on hover, from
the served app's clock; utilisation is coloured by one rule (`level`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import Request
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.responses import HTMLResponse, RedirectResponse

from tidegate.app import App
from tidegate.dashboard.access import Viewer
from tidegate.dashboard.graph import row_id
from tidegate.domain import attempts
from tidegate.domain.durations import format_duration
from tidegate.domain.model import EventType

_UNITS = ((86_400, "d"), (3600, "h"), (60, "min"), (1, "s"))
WARN_AT = 0.60  # utilisation at or above this is yellow
FULL_AT = 0.85  # and above this red

_env = Environment(loader=PackageLoader("tidegate.dashboard", "templates"), autoescape=select_autoescape(default=True))


def app_of(request: Request) -> App:
    app: App = request.app.state.tidegate
    return app


def now_of(request: Request) -> datetime:
    return datetime.fromtimestamp(app_of(request).clock.wall(), UTC)


def level(used: int | None, limit: int | None) -> str:
    """ok (below 60 %), warn (60-85 %) or full (above 85 %); ok when unlimited."""
    if used is None or limit is None:
        return "ok"
    if limit <= 0:
        return "full" if used > 0 or limit == 0 else "ok"
    share = used / limit
    return "full" if share > FULL_AT else "warn" if share >= WARN_AT else "ok"


def percent(used: int | None, limit: int | None) -> int:
    if not used or not limit or limit <= 0:
        return 100 if limit == 0 else 0
    return min(100, round(100 * used / limit))


def relative(seconds: float) -> str:
    """'just now', '42 s ago', '3 min ago', 'in 5 s', ... (whole units, the largest that fits)."""
    ahead = seconds < 0
    span = abs(seconds)
    if span < 1:
        return "just now"
    size, unit = next((size, unit) for size, unit in _UNITS if span >= size)  # span >= 1: seconds fit
    amount = f"{int(span // size)} {unit}"
    return f"in {amount}" if ahead else f"{amount} ago"


def exact(moment: datetime | None) -> str:
    return "" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def when(moment: datetime | None, now: datetime) -> Markup:
    """A <time> element: relative text, the exact time on hover and for screen readers' users."""
    if moment is None:
        return Markup('<span class="muted">—</span>')
    text = relative((now - moment).total_seconds())
    iso = moment.astimezone(UTC).isoformat()
    return Markup('<time datetime="{}" title="{}">{}</time>').format(iso, exact(moment), text)


def duration(seconds: float | None) -> str:
    return "—" if seconds is None else format_duration(seconds)


def chips(values: dict[str, str]) -> Markup:
    return Markup("").join(Markup('<span class="chip">{}={}</span>').format(k, v) for k, v in sorted(values.items()))


def clock(moment: datetime) -> str:
    """HH:MM:SS.mmm UTC: events of one run, seconds apart, told apart at a glance."""
    return moment.astimezone(UTC).strftime("%H:%M:%S.%f")[:-3]


def scope_id(scope: str) -> str:
    """An HTML id for a scope key (anchors from the overview to its holders)."""
    return "scope-" + "".join(ch if ch.isalnum() else "-" for ch in scope)


_env.filters.update(clock=clock, duration=duration, chips=chips, scope_id=scope_id, exact=exact, row_id=row_id)
# A run's attempts in words (a page) or in a cell, as the CLI says them (domain/attempts.py).
_env.filters.update(attempts=attempts.describe, attempts_cell=attempts.compact)
_env.globals.update(
    level=level,
    percent=percent,
    when=when,
    # every type the stream sends as `event:` (the enum lacks the worker's CapacityOverflow): each refreshes
    event_types=" ".join(sorted({*(kind.value for kind in EventType), "CapacityOverflow"})),
)


# Pages load only this site's own files (no inline script), cannot be framed, and are never cached
# (they show live state, and a shared cache must not keep what a token was shown).
HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; "
    "form-action 'self'; base-uri 'none'; object-src 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def root_of(request: Request) -> str:
    """The prefix the API is mounted at ('' when served at the root): every link and redirect keeps it."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def redirect(request: Request, path: str) -> RedirectResponse:
    """After a form: back to a page (303, so the browser GETs it; a reload does not resend the form)."""
    return RedirectResponse(root_of(request) + path, status_code=303)


def page(
    request: Request, template: str, viewer: Viewer | None, status_code: int = 200, **context: Any
) -> HTMLResponse:
    root = root_of(request)
    path = request.url.path
    path = path[len(root) :] if root and path.startswith(root) else path
    answer = request.method != "GET"  # a form's answer: its address cannot be fetched again to refresh it
    html = _env.get_template(template).render(
        request=request, viewer=viewer, now=now_of(request), root=root, path=path, answer=answer, **context
    )
    return HTMLResponse(html, status_code=status_code, headers=HEADERS)
