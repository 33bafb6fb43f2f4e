"""Every JSON client configuration in docs/clients.md connects to a real server and works."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer

DOC = Path(__file__).resolve().parents[2] / "docs" / "clients.md"
TS_CLIENT = Path(__file__).resolve().parent / "ts_client"
KEY_PLACEHOLDER = re.compile(r"\$\{(?:env:|input:)?[A-Za-z_-]+\}|mmk_your_key_here|\$MEMORY_MCP_KEY")
VARIABLE = re.compile(r"\$\{([A-Z_]+)\}")


def json_snippets() -> list[dict[str, Any]]:
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", DOC.read_text(), re.S)]


def shell_lines() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), re.S)
    return [line for block in blocks for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def endpoint(snippet: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The URL and headers a client would use, from either config shape (http or mcp-remote)."""
    servers = snippet.get("mcpServers") or snippet["servers"]
    server = servers["memory"]
    if "url" in server:
        return server["url"], server.get("headers", {})
    args = server["args"]
    assert not any(" " in arg for arg in args), args  # Windows and Cursor mangle arguments with spaces
    url = next(a for a in args if a.startswith("http"))
    name, _, value = args[args.index("--header") + 1].partition(":")
    # mcp-remote expands ${VAR} in its arguments from the environment the config gives it.
    return url, {name: VARIABLE.sub(lambda m: server["env"][m[1]], value)}


def test_docs_have_a_snippet_per_client() -> None:
    assert len(json_snippets()) == 4  # Claude Code, Claude Desktop, Cursor, VS Code


async def connects(url: str, headers: dict[str, str]) -> str:
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        result = await client.call_tool("whoAmI", {})
    assert not result.is_error
    assert result.structured_content is not None
    return str(result.structured_content["user"]["displayName"])


async def test_every_snippet_connects(server: RunningServer) -> None:
    await make_space(server.db, "docs-space")
    key = await make_key(server.db, await make_user(server.db, "snippet-user"), {"docs-space": "ReadWrite"})
    port = server.base.rsplit(":", 1)[1]
    for snippet in json_snippets():
        url, headers = endpoint(snippet)
        assert url == "http://127.0.0.1:PORT/mcp"
        resolved = {name: KEY_PLACEHOLDER.sub(key, value) for name, value in headers.items()}
        assert resolved == {"Authorization": f"Bearer {key}"}
        assert await connects(url.replace("PORT", port), resolved) == "Snippet User"


async def test_the_claude_code_command_stores_the_variable_not_the_key(server: RunningServer) -> None:
    await make_space(server.db, "docs-space")
    key = await make_key(server.db, await make_user(server.db, "snippet-user"), {"docs-space": "Read"})
    (line,) = [line for line in shell_lines() if line.startswith("claude mcp add")]
    # What the shell hands to `claude` (no expansion inside single quotes), as Claude Code stores it.
    args = shlex.split(line)
    header = args[args.index("--header") + 1]
    assert header == "Authorization: Bearer ${MEMORY_MCP_KEY}"
    url = next(a for a in args if a.startswith("http://"))
    # Claude Code expands ${VAR} from its environment when it connects.
    name, _, value = header.partition(": ")
    expanded = VARIABLE.sub(lambda m: {"MEMORY_MCP_KEY": key}[m[1]], value)
    port = server.base.rsplit(":", 1)[1]
    assert await connects(url.replace("PORT", port), {name: expanded}) == "Snippet User"


def test_the_export_line_loads_the_key_from_the_bootstrap_file(tmp_path: Path) -> None:
    key_file = tmp_path / ".local" / "share" / "memory-mcp" / "bootstrap-key"
    key_file.parent.mkdir(parents=True)
    key_file.write_text("mmk_0123456789_abc\n")
    (line,) = [line for line in shell_lines() if line.startswith("export MEMORY_MCP_KEY=")]
    shown = subprocess.run(
        ["bash", "-c", f'{line} && printf %s "$MEMORY_MCP_KEY"'],
        env={"HOME": str(tmp_path), "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown == "mmk_0123456789_abc"


def sdk_snippet(language: str) -> str:
    (block,) = re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)
    return str(block)


async def test_the_sdk_snippets_save_and_find_a_memory(server: RunningServer, tmp_path: Path) -> None:
    """The Python and the TypeScript SDK snippets, as written, each in a process of its own."""
    await make_space(server.db, "sdk")
    key = await make_key(server.db, await make_user(server.db, "sdk-user"), {"sdk": "ReadWrite"}, "sdk")
    env = {**os.environ, "MEMORY_MCP_KEY": key, "MEMORY_MCP_URL": server.mcp_url}
    python = tmp_path / "memory_client.py"
    python.write_text(sdk_snippet("python"))
    # The snippet's modules resolve from tests/server/ts_client, as from a project's own npm install.
    (tmp_path / "node_modules").symlink_to(TS_CLIENT / "node_modules")
    node = tmp_path / "memory-client.mjs"
    node.write_text(sdk_snippet("js"))
    for command in ([sys.executable, str(python)], [shutil.which("node") or "node", str(node)]):
        proc = await asyncio.create_subprocess_exec(
            *command, env=env, cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), 180)
        assert proc.returncode == 0, (command, err.decode()[-2000:])
        # The first run saved it; the second found the same memory again (a save of the same text
        # returns the live memory), so each prints exactly one line.
        assert out.decode().splitlines() == ["The staging database runs in Frankfurt."], command
