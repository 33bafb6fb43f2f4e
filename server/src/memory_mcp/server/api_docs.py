"""The REST API's own documentation: Swagger UI at /docs from packaged assets (no CDN), and
summaries and descriptions for every operation taken from the route's docstring."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

ASSETS = "/docs/assets"


def describe_operations(app: FastAPI) -> None:
    """Each operation's summary is its docstring's first line (or first sentence), its description the rest."""
    generate = app.openapi
    described: list[dict[str, Any]] = []

    def openapi() -> dict[str, Any]:
        schema = generate()  # built once, then cached by FastAPI
        if not described:
            for operations in schema["paths"].values():
                for operation in operations.values():
                    text = operation.get("description", "").strip()
                    first, _, rest = text.partition("\n")
                    if not rest:  # one paragraph: its first sentence sums it up
                        first, rest = text.split(". ", 1)[0], text
                    if first:
                        operation["summary"] = first.strip().rstrip(".")
                        operation["description"] = rest.strip()
            described.append(schema)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def install_api_docs(app: FastAPI) -> None:
    """Serve Swagger UI at /docs; the app must be built with ``docs_url=None``."""
    app.mount(ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="swagger-ui-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
            swagger_ui_parameters={"persistAuthorization": True},
        )

    describe_operations(app)
