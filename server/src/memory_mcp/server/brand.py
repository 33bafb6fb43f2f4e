"""How Memory-MCP shows itself to people: its title, website and icon, in ``serverInfo``, on the
OAuth pages and at a stable path of the server.

The icon comes in a light and a dark variant (for light and dark backgrounds), each as SVG and as a
256-pixel PNG drawn from that SVG; the files are package data under ``static/icons``.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import APIRouter, HTTPException
from fastapi.responses import Response
from mcp.types import Icon

TITLE = "Memory-MCP"
WEBSITE_URL = "https://github.com/memory-mcp/memory-mcp"
ICON_PATH = "/icons"
THEMES = ("light", "dark")
_TYPES = {"svg": "image/svg+xml", "png": "image/png"}
_SIZES = {"svg": ["any"], "png": ["256x256"]}
# The files never change within a release; a day keeps a host from asking on every listing.
_CACHE = "public, max-age=86400"


def icon_name(theme: str, kind: str) -> str:
    return f"memory-mcp-{theme}.{kind}"


@cache
def icon_bytes(name: str) -> bytes:
    """One icon file (package data); KeyError for a name that is not one of them."""
    if name not in {icon_name(t, k) for t in THEMES for k in _TYPES}:
        raise KeyError(name)
    return resources.files(__package__).joinpath("static", "icons", name).read_bytes()


def icons(origin: str) -> list[Icon]:
    """``serverInfo.icons``: every variant, at this server's ``origin``."""
    return [
        Icon(
            src=f"{origin.rstrip('/')}{ICON_PATH}/{icon_name(theme, kind)}",
            mime_type=mime,
            sizes=_SIZES[kind],
            theme=theme,  # type: ignore[arg-type]
        )
        for kind, mime in _TYPES.items()
        for theme in THEMES
    ]


def inline_icon() -> str:
    """The icon as markup for a page whose policy loads no images: both SVGs inline, the one that
    fits the person's colour scheme shown."""
    light, dark = (icon_bytes(icon_name(t, "svg")).decode() for t in THEMES)
    sized = 'width="28" height="28" aria-hidden="true" style="vertical-align:-5px;margin-right:.5rem"'
    return (
        "<style>.mm-dark{display:none}@media (prefers-color-scheme:dark)"
        "{.mm-light{display:none}.mm-dark{display:inline}}</style>"
        # The first match is the <svg> element's own size (the tile inside has the same numbers).
        + light.replace('width="64" height="64"', f'class="mm-light" {sized}', 1).strip()
        + dark.replace('width="64" height="64"', f'class="mm-dark" {sized}', 1).strip()
    )


def router() -> APIRouter:
    """``GET /icons/<name>``: the icon files, for hosts that show a server's icon."""
    routes = APIRouter(include_in_schema=False)

    @routes.get(ICON_PATH + "/{name}")
    async def icon(name: str) -> Response:
        try:
            body = icon_bytes(name)
        except KeyError:
            raise HTTPException(404, "no icon of that name") from None
        return Response(body, media_type=_TYPES[name.rsplit(".", 1)[1]], headers={"Cache-Control": _CACHE})

    return routes
