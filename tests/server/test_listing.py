"""What a listing's reviewer checks, through the real MCP client over real HTTP: every tool titled,
annotated and named within limits, a lean ``tools/list``, and a server that names itself with a
title, a website and an icon it serves (also on the OAuth pages)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx2
from mcp.types import Tool

from tests.factories import make_key, make_space, make_user
from tests.server.conftest import APP_ONLY_TOOLS, RunningServer, apps_session, mcp_session
from tests.server.oauth_flow import Flow

# (readOnlyHint, destructiveHint, idempotentHint, openWorldHint) as each tool's effect has them
# (docs/clients.md, "Tool annotations"); every hint is set, none left to its default.
HINTS = {
    "search_memory": (True, False, True, False),  # counts recalls, changes no memory
    "add_memory": (False, True, False, False),  # forgetting retires; a save may supersede
    "listDocuments": (True, False, True, False),
    "getDocument": (True, False, True, False),
    "listMemories": (True, False, True, False),
    "listSpaces": (True, False, True, False),
    "whoAmI": (True, False, True, False),
    "select-space": (False, False, True, False),  # a preference of the key
    "set-active-space": (False, False, True, False),
    "guided-save": (True, False, True, False),  # opens a draft; nothing is saved until submitted
    "save-memory": (False, True, True, False),  # a near-restatement supersedes the live memory
    "upload-file": (True, False, True, False),
    "memory-graph": (True, False, True, False),
    "fetch-graph-data": (True, False, True, False),
    "prepare-file-upload": (False, False, False, False),  # mints a short-lived token
}
# The connectors directory's limit, and the characters the spec allows in a tool name.
MAX_NAME = 64
NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
TOOLS_LIST_BUDGET = 8000  # characters of JSON for a 2026-07-28 client without MCP Apps


def _json(tools: list[Tool]) -> str:
    return json.dumps(
        [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools], separators=(",", ":")
    )


async def _reader_key(server: RunningServer) -> str:
    space = await make_space(server.db)
    return await make_key(server.db, await make_user(server.db), {space: "Read"}, space)


async def test_every_tool_is_titled_annotated_and_named_within_limits_and_the_plain_list_is_lean(
    server: RunningServer,
) -> None:
    key = await _reader_key(server)
    async with apps_session(server, key) as s:
        every = (await s.client.list_tools()).tools
    async with mcp_session(server, key) as s:
        assert s.client.protocol_version == "2026-07-28"
        plain = (await s.client.list_tools()).tools
    assert {t.name for t in every} == set(HINTS)
    assert {t.name for t in plain} == set(HINTS) - APP_ONLY_TOOLS
    for tool in every:
        assert len(tool.name) <= MAX_NAME and NAME.fullmatch(tool.name), tool.name
        assert tool.title and tool.title[0].isupper() and len(tool.title) <= 40, tool.name
        hints = tool.annotations
        assert hints is not None, tool.name
        got = (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint, hints.open_world_hint)
        assert got == HINTS[tool.name], tool.name
    assert len({t.title for t in every}) == len(every)  # no two tools look alike in a host's list
    size = len(_json(plain))
    assert size <= TOOLS_LIST_BUDGET, size
    # What a model needs is whole in the lean list: every description, every argument with its
    # description and limits; an output schema there says only that a result is structured.
    full = {t.name: t for t in every}
    for tool in plain:
        assert tool.description and tool.description == full[tool.name].description
        assert tool.input_schema == full[tool.name].input_schema
        for name, prop in tool.input_schema.get("properties", {}).items():
            assert "type" in prop or "enum" in prop, (tool.name, name)
        if "ui" in (full[tool.name].meta or {}):
            assert tool.output_schema is None and not (tool.meta or {}).get("ui"), tool.name
        else:
            assert tool.output_schema == {"type": "object"}, tool.name
            assert set(full[tool.name].output_schema["properties"]), tool.name  # type: ignore[index]


async def test_server_info_has_a_title_a_website_and_icons_the_server_serves(server: RunningServer) -> None:
    key = await _reader_key(server)
    async with mcp_session(server, key) as s:
        info = s.client.server_info
    assert info is not None
    assert info.name == "memory-mcp" and info.title == "Memory-MCP"
    assert info.website_url is not None and info.website_url.startswith("https://")
    icons = info.icons or []
    kinds = {(icon.mime_type, icon.theme) for icon in icons}
    assert kinds == {(m, t) for m in ("image/svg+xml", "image/png") for t in ("light", "dark")}
    async with httpx2.AsyncClient(timeout=30) as http:
        bodies: dict[Any, bytes] = {}
        for icon in icons:
            assert icon.src.startswith(server.base + "/icons/"), icon.src
            answer = await http.get(icon.src)  # no credential: a host fetches it as it lists servers
            assert answer.status_code == 200, icon.src
            assert answer.headers["content-type"] == icon.mime_type
            bodies[(icon.mime_type, icon.theme)] = answer.content
            if icon.mime_type == "image/png":
                assert answer.content.startswith(b"\x89PNG\r\n\x1a\n")
                assert icon.sizes == ["256x256"]
                width, height = int.from_bytes(answer.content[16:20]), int.from_bytes(answer.content[20:24])
                assert (width, height) == (256, 256)
            else:
                assert answer.content.lstrip().startswith(b"<svg") and b"<script" not in answer.content
        assert bodies[("image/svg+xml", "light")] != bodies[("image/svg+xml", "dark")]
        assert bodies[("image/png", "light")] != bodies[("image/png", "dark")]
        missing = await http.get(server.base + "/icons/../../etc/passwd")
        assert missing.status_code == 404
        assert (await http.get(server.base + "/icons/other.svg")).status_code == 404


async def test_the_sign_in_page_shows_the_icon_for_either_colour_scheme(server: RunningServer) -> None:
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        flow = Flow(http)
        await flow.register()
        page = await http.get("/authorize", params=flow.authorize_params())
        svg = (await http.get("/icons/memory-mcp-light.svg")).text
    assert page.status_code == 200
    header = page.text.split("</h1>", 1)[0]
    assert header.count("<svg") == 2 and 'class="mm-light"' in header and 'class="mm-dark"' in header
    # The same drawing as the served file, inline: the page's policy loads no images.
    assert re.search(r'<path d="([^"]+)"', svg).group(1) in header  # type: ignore[union-attr]
    # Only the drawing is sized to the heading; the tile inside it still fills its viewBox.
    assert header.count('width="28" height="28"') == 2 and header.count('<rect width="64" height="64"') == 2
    assert "img-src" not in page.headers["content-security-policy"]
