"""The OpenAPI document: every body a named schema, every error in the one error shape.

Clients generate code from the document, so no request or response body may
be an anonymous inline schema, and no route may fall back to FastAPI's own
validation-error shape: every error is `Error` (or `AdmissionError` for 429).
The interactive docs load nothing from another site (they work offline).
"""

from __future__ import annotations

from html.parser import HTMLParser

from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.apps.api import local_client
from tidegate import App

ERROR_SCHEMAS = {"#/components/schemas/Error", "#/components/schemas/AdmissionError"}


def test_every_body_is_a_named_schema_and_every_error_is_the_error_shape(app: App) -> None:
    client = local_client(app.asgi())
    document = client.get("/api/v1/openapi.json").json()
    assert document["openapi"].startswith("3.")
    assert "HTTPValidationError" not in document["components"]["schemas"]
    operations = [(path, method, op) for path, item in document["paths"].items() for method, op in item.items()]
    assert len(operations) >= 8
    for path, method, operation in operations:
        where = f"{method.upper()} {path}"
        bodies = [operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")]
        for status, response in operation["responses"].items():
            schema = response.get("content", {}).get("application/json", {}).get("schema")
            bodies.append(schema)
            if status.startswith(("4", "5")):
                assert schema["$ref"] in ERROR_SCHEMAS, f"{where} {status}"
        for schema in filter(None, bodies):
            assert set(schema) == {"$ref"}, f"{where}: an anonymous schema {schema}"
    assert "Retry-After" in document["paths"]["/api/v1/runs"]["post"]["responses"]["429"]["headers"]
    assert client.get("/api/docs").status_code == 200


class _Assets(HTMLParser):
    """Every URL a page loads (src, href) and the text of each of its scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]
        if tag == "script":
            self._in_script = True
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = self._in_script and tag != "script"

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data


def test_the_docs_load_only_this_servers_files_under_the_dashboards_policy(app: App) -> None:
    outer = FastAPI()
    outer.mount("/ops", app.asgi())  # mounted under a prefix, every link keeps it
    for client, root in ((local_client(app.asgi()), ""), (TestClient(outer, base_url="http://127.0.0.1"), "/ops")):
        page = client.get(f"{root}/api/docs")
        assert page.status_code == 200
        policy = page.headers["Content-Security-Policy"]
        assert "default-src 'self'" in policy and "unsafe-eval" not in policy and "script-src" not in policy
        assets = _Assets()
        assets.feed(page.text)
        assert assets.scripts and all(text.strip() == "" for text in assets.scripts)  # no inline script
        assert len(assets.urls) >= 3 and f'data-openapi="{root}/api/v1/openapi.json"' in page.text
        for url in assets.urls:
            assert url.startswith(f"{root}/") and not url.startswith("//"), url  # this server's, not a CDN's
            assert client.get(url).status_code == 200, url
        bundle = client.get(f"{root}/api/docs/assets/swagger-ui-bundle.js").text
        assert "SwaggerUIBundle" in bundle and "openapi: 3.1" in bundle  # a Swagger UI that reads FastAPI's 3.1
