"""A real server (uvicorn, real HTTP) per test, and real MCP clients talking to it."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import Embedder
from memory_mcp.server.app import create_app
from memory_mcp.store.db import Database

# The public tool names: the MCP contract of DESIGN.md.
TOOLS = {
    "search_memory",
    "add_memory",
    "listDocuments",
    "getDocument",
    "listMemories",
    "listSpaces",
    "whoAmI",
    "select-space",
    # MCP Apps: the widgets' launchers, and the app-only tools the widgets call.
    "guided-save",
    "upload-file",
    "memory-graph",
    "set-active-space",
    "save-memory",
    "prepare-file-upload",
    "fetch-graph-data",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RunningServer:
    base: str
    db: Database  # for arranging test data directly through the store

    @property
    def mcp_url(self) -> str:
        return f"{self.base}/mcp"


@asynccontextmanager
async def run_server(
    app_url: str, embedder: Embedder | None, **overrides: Any
) -> AsyncIterator[RunningServer]:
    port = free_port()
    settings = Settings(host="127.0.0.1", port=port, database_url=app_url, **overrides)
    # One connection: a request that held two at once would wait for itself and fail the test.
    app = create_app(settings, Database(app_url, pool_size=1), embedder)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    setup_db = Database(app_url, pool_size=2)
    try:
        yield RunningServer(f"http://127.0.0.1:{port}", setup_db)
    finally:
        server.should_exit = True
        await task
        await setup_db.close()


@pytest.fixture
async def server(db_urls: tuple[str, str], embedder: Embedder) -> AsyncIterator[RunningServer]:
    async with run_server(db_urls[0], embedder) as running:
        yield running


class McpSession:
    """A connected MCP client; ``call`` returns the raw result, ``ok`` asserts success."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, tool: str, **arguments: Any) -> CallToolResult:
        return await self.client.call_tool(tool, arguments)

    async def ok(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await self.call(tool, **arguments)
        assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
        assert result.content and result.content[0].type == "text" and result.content[0].text
        assert isinstance(result.structured_content, dict)
        return result.structured_content

    async def error(self, tool: str, **arguments: Any) -> str:
        result = await self.call(tool, **arguments)
        assert result.is_error, result.structured_content
        text: str = result.content[0].text  # type: ignore[union-attr]
        return text


@asynccontextmanager
async def mcp_session(server: RunningServer, key: str) -> AsyncIterator[McpSession]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http,
        Client(streamable_http_client(server.mcp_url, http_client=http)) as client,
    ):
        yield McpSession(client)
