"""The OpenAPI document: every body a named schema, every error in the one error shape.

Clients generate code from the document, so no request or response body may
be an anonymous inline schema, and no route may fall back to FastAPI's own
validation-error shape: every error is `Error` (or `AdmissionError` for 429).
"""

from __future__ import annotations

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
