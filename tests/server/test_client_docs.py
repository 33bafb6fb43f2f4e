"""Every JSON client configuration in docs/clients.md connects to a real server and works."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer

DOC = Path(__file__).resolve().parents[2] / "docs" / "clients.md"
KEY_PLACEHOLDER = re.compile(r"\$\{(?:env:|input:)?[A-Za-z_-]+\}|mmk_your_key_here|\$MEMORY_MCP_KEY")


def json_snippets() -> list[dict[str, Any]]:
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", DOC.read_text(), re.S)]


def endpoint(snippet: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The URL and headers a client would use, from either config shape (http or mcp-remote)."""
    servers = snippet.get("mcpServers") or snippet["servers"]
    server = servers["memory"]
    if "url" in server:
        return server["url"], server.get("headers", {})
    args = server["args"]
    url = next(a for a in args if a.startswith("http"))
    name, _, value = args[args.index("--header") + 1].partition(": ")
    return url, {name: value}


def test_docs_have_a_snippet_per_client() -> None:
    assert len(json_snippets()) == 4  # Claude Code, Claude Desktop, Cursor, VS Code


async def test_every_snippet_connects(server: RunningServer) -> None:
    await make_space(server.db, "docs-space")
    key = await make_key(server.db, await make_user(server.db, "snippet-user"), {"docs-space": "ReadWrite"})
    for snippet in json_snippets():
        url, headers = endpoint(snippet)
        assert url == "http://127.0.0.1:8765/mcp"
        resolved = {name: KEY_PLACEHOLDER.sub(key, value) for name, value in headers.items()}
        assert resolved == {"Authorization": f"Bearer {key}"}
        live_url = url.replace("http://127.0.0.1:8765", server.base)
        async with (
            httpx2.AsyncClient(headers=resolved) as http,
            Client(streamable_http_client(live_url, http_client=http)) as client,
        ):
            result = await client.call_tool("whoAmI", {})
        assert not result.is_error
        assert result.structured_content is not None
        assert result.structured_content["user"]["displayName"] == "Snippet User"
