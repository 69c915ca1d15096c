"""`/api/docs`: Swagger UI from the installed `fastapi-offline` package, under the dashboard's CSP.

FastAPI's own page loads Swagger UI from a CDN (a floating major version, no
integrity check) and starts it with an inline script: third-party code would
run in the origin of the dashboard's cookie, and the page is blank offline.
Here every asset comes from this server: Swagger UI's files from the package's
install folder (a pinned dependency of the `service` extra), the script that
starts it from the dashboard's static files, so the page keeps the dashboard's
policy (scripts and styles from this server only), plus `data:` images, which
Swagger UI's stylesheet draws its icons with.
"""

from __future__ import annotations

from html import escape
from importlib.resources import files

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from tidegate.api.security import can_read
from tidegate.dashboard.render import HEADERS

ASSETS = "/assets"  # under the docs' URL
SWAGGER_UI = files("fastapi_offline") / "static"  # swagger-ui-bundle.js, swagger-ui.css
_HEADERS = {**HEADERS, "Content-Security-Policy": HEADERS["Content-Security-Policy"] + "; img-src 'self' data:"}

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>tidegate API</title>
<link rel="icon" href="{root}/static/favicon.svg">
<link rel="stylesheet" href="{assets}/swagger-ui.css">
</head>
<body>
<div id="swagger-ui" data-openapi="{openapi}"></div>
<script src="{assets}/swagger-ui-bundle.js"></script>
<script src="{root}/static/api-docs.js"></script>
</body>
</html>
"""


def install(api: FastAPI, docs_url: str, openapi_url: str) -> None:
    """The docs page (readable by any token, none on loopback) and Swagger UI's files (public, as /static is)."""
    api.mount(docs_url + ASSETS, StaticFiles(directory=str(SWAGGER_UI)), name="api-docs-assets")

    @api.get(docs_url, include_in_schema=False, dependencies=[can_read])
    async def docs(request: Request) -> HTMLResponse:
        root = escape(request.scope.get("root_path", "").rstrip("/"))  # mounted under a prefix: links keep it
        page = _PAGE.format(root=root, assets=root + docs_url + ASSETS, openapi=root + openapi_url)
        return HTMLResponse(page, headers=_HEADERS)
