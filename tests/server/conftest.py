"""A real server (uvicorn, real HTTP) per test, and real MCP clients talking to it."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn
from mcp import Client
from mcp.client.extension import advertise
from mcp.client.streamable_http import streamable_http_client
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID
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
# Listed only to clients that declare MCP Apps (a host that renders widgets).
APP_ONLY_TOOLS = {"set-active-space", "save-memory", "prepare-file-upload", "fetch-graph-data"}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def url_host(host: str) -> str:
    """``host`` as it stands in a URL: IPv6 addresses in brackets."""
    return f"[{host}]" if ":" in host else host


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


@pytest.fixture
async def docs_server(
    db_urls: tuple[str, str], embedder: Embedder, tmp_path: Path
) -> AsyncIterator[RunningServer]:
    """A server whose document workers look for jobs every 0.2 s, its files under ``tmp_path``."""
    async with run_server(db_urls[0], embedder, data_dir=tmp_path, document_poll_s=0.2) as running:
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


@dataclass
class ServedProcess:
    base: str
    proc: subprocess.Popen[str]


@contextmanager
def serve_process(
    database_url: str, host: str = "127.0.0.1", port: int | None = None, **env: str
) -> Iterator[ServedProcess]:
    """``memory-mcp serve`` as its own process on ``database_url`` (embedder unreachable: the
    server serves regardless, and nothing here needs a vector), with ``env`` added to its settings.
    Bound to the wildcard ``::``, it is reached on ``::1``."""
    reach = {"::": "::1", "0.0.0.0": "127.0.0.1"}.get(host, host)
    port = port or free_port(reach)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memory_mcp.cli",
            "serve",
            "--database-url",
            database_url,
            "--host",
            host,
            "--port",
            str(port),
            "--embedder",
            f"http://127.0.0.1:{free_port()}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MEMORY_MCP_LOG_LEVEL": "warning", "MEMORY_MCP_BOOTSTRAP": "false", **env},
    )
    base = f"http://{url_host(reach)}:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                if httpx2.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.3)
        yield ServedProcess(base, proc)
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()  # a server that ignores SIGTERM fails its test; it must not outlive it
            proc.communicate()


@asynccontextmanager
async def apps_session(server: RunningServer, key: str) -> AsyncIterator[McpSession]:
    """A client that declares MCP Apps support, as a host that renders widgets does."""
    apps = advertise(EXTENSION_ID, {"mimeTypes": [APP_MIME_TYPE]})
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http,
        Client(streamable_http_client(server.mcp_url, http_client=http), extensions=[apps]) as client,
    ):
        yield McpSession(client)
