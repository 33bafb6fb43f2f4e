"""The TypeScript MCP SDK client against a real server: it validates every structured result
against the tool's output schema, so a schema mismatch fails here."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

from tests.factories import make_key, make_space, make_user
from tests.server.conftest import TOOLS, RunningServer

CLIENT_DIR = Path(__file__).parent / "ts_client"


async def test_typescript_sdk_client_calls_every_tool(server: RunningServer) -> None:
    node = shutil.which("node")
    assert node is not None, "Node.js is required for this test (.ci/run installs it)"
    assert (CLIENT_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir(), (
        "run `npm ci` in tests/server/ts_client (.ci/run does)"
    )
    await make_space(server.db, "ts")
    key = await make_key(server.db, await make_user(server.db, "tess"), {"ts": "ReadWrite"}, "ts")
    proc = await asyncio.create_subprocess_exec(
        node,
        "client.mjs",
        server.mcp_url,
        key,
        cwd=CLIENT_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    summary = json.loads(out.decode().strip().splitlines()[-1])
    # It speaks the handshake-era protocol, whose capabilities a stateless server cannot hold: every
    # tool is listed to it (tests/server/test_protocol.py).
    assert summary["tools"] == sorted(TOOLS)
    calls = summary["calls"]
    assert (
        set(calls) == TOOLS
    )  # every tool answered with schema-valid structured content (app-only: callable)
    assert calls["add_memory"]["status"] == "already_exists"  # the second, duplicate save
    assert calls["search_memory"]["results"][0]["content"] == "The TypeScript client saved this."
    assert calls["getDocument"]["content"] == "The TypeScript client saved this."
    assert calls["whoAmI"]["user"]["displayName"] == "Tess"
    assert summary["forgetById"]["status"] == "forgotten"
    assert summary["errors"] == {
        "search_memory": "Error executing tool search_memory: space 'no-such-space' not found"
    }
    widgets = [
        f"ui://memory-mcp/{name}" for name in ("guided-save", "memory-graph", "select-space", "upload-file")
    ]
    assert summary["resources"] == [
        "memory-mcp://memories",
        "memory-mcp://profile",
        "memory-mcp://spaces",
        *widgets,
    ]
    assert calls["save-memory"]["status"] == "saved" and calls["fetch-graph-data"]["space"] == "ts"
    assert "The TypeScript client saved this." in summary["profile"]
    assert "written by people" in summary["prompt"]
