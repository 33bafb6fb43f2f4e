"""What the fuzz, crash and soak harnesses share for the newer paths: a Curate key made with the
command line, one-time upload tokens, multipart bodies built by hand (so they can be broken), import
files, and the server process's memory. The OAuth flow is the tests' own (`tests/server/oauth_flow.py`).

Not a benchmark of its own.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import psutil


def curate_key(data_dir: Path, space: str = "default", name: str = "bench-curator") -> str:
    """A key of the bootstrap user with the Curate grant on ``space`` (the import route needs it),
    made by ``memory-mcp key create`` against the running server's data dir."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "memory_mcp.cli",
            "key",
            "create",
            name,
            "--user",
            "admin",
            "--grant",
            f"{space}=Curate",
            "--data-dir",
            str(data_dir),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "MEMORY_MCP_LOG_LEVEL": "warning"},
    )
    found = re.search(r"\bmmk_\S+", done.stdout)
    if found is None:
        raise RuntimeError(f"key create printed no key: {done.stdout[-300:]} {done.stderr[-300:]}")
    return found.group(0)


def upload_token_call(space: str | None = None) -> dict[str, Any]:
    """The JSON-RPC request of the ``prepare-file-upload`` tool (the server answers it statelessly)."""
    arguments = {"containerTag": space} if space else {}
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "prepare-file-upload", "arguments": arguments},
    }


MCP_ACCEPT = {"Accept": "application/json, text/event-stream"}


def token_of(answer: Any) -> str:
    token: str = answer["result"]["structuredContent"]["uploadToken"]
    return token


async def upload_token(http: httpx2.AsyncClient, space: str | None = None) -> str:
    """A one-time upload token (``http`` carries the key and the server's base URL)."""
    response = await http.post("/mcp", json=upload_token_call(space), headers=MCP_ACCEPT)
    response.raise_for_status()
    return token_of(response.json())


@dataclass(frozen=True)
class Part:
    """One part of a multipart body; ``filename`` and ``content_type`` are sent as given (raw)."""

    name: str
    data: bytes
    filename: str | None = None
    content_type: str | None = None


def multipart(parts: list[Part], boundary: str | None = None, close: bool = True) -> tuple[bytes, str]:
    """A ``multipart/form-data`` body and its Content-Type; ``close=False`` leaves out the closing
    boundary (a body cut short). Names are encoded as UTF-8 with surrogates passed through, quotes
    and all, so a hostile name reaches the server's parser unchanged."""
    boundary = boundary or "bench" + secrets.token_hex(12)
    out = bytearray()
    for part in parts:
        disposition = f'form-data; name="{part.name}"'
        if part.filename is not None:
            disposition += f'; filename="{part.filename}"'
        out += f"--{boundary}\r\n".encode()
        out += b"Content-Disposition: " + disposition.encode("utf-8", "surrogatepass") + b"\r\n"
        if part.content_type is not None:
            out += b"Content-Type: " + part.content_type.encode("utf-8", "surrogatepass") + b"\r\n"
        out += b"\r\n" + part.data + b"\r\n"
    if close:
        out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


def jsonl_file(contents: list[str], prefix: str) -> bytes:
    """An import file in memory-mcp's own export format: one memory a line, ids ``prefix-N``."""
    lines = [
        json.dumps({"type": "memory", "id": f"{prefix}-{n}", "content": content})
        for n, content in enumerate(contents)
    ]
    return ("\n".join(lines) + "\n").encode()


def tree_rss(pid: int) -> tuple[int, int]:
    """RSS of the process ``pid`` and of its children that are not PostgreSQL (an OCR or media
    program the worker ran), in bytes; (0, 0) once it is gone."""
    try:
        proc = psutil.Process(pid)
        own = int(proc.memory_info().rss)
        children = 0
        for child in proc.children(recursive=True):
            try:
                if child.name() != "postgres":
                    children += int(child.memory_info().rss)
            except psutil.Error:
                continue
        return own, children
    except psutil.Error:
        return 0, 0
