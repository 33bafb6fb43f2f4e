"""Outside checkers against a live `memory-mcp serve`: the official MCP conformance suite, MCP
Inspector's CLI and the Python SDK's client in both of its modes.

Node 22 (npm's `node` package), `@modelcontextprotocol/conformance` and
`@modelcontextprotocol/inspector` are installed with npm into a cache folder outside the
repository (``--tools-dir``, default ``~/.cache/memory-mcp/checkers``), once. The server runs on a
fresh temporary data dir (embedded PostgreSQL, the first-start key). The conformance suite has no
option for a header, so it talks to a small proxy on loopback that adds the API key; Inspector
and the SDK send the key themselves.

What it prints:
- the conformance suite's summary in server mode, held against ``bench/conformance-expected.yaml``
  (each entry says why that scenario does not apply): a scenario that applies and fails, or an
  expected failure that passes, makes the exit status 1;
- the ``tools/list`` sizes a 2026-07-28 client sees without and with MCP Apps;
- after ``--requests`` requests of every kind (default 10,000 in all): the response header count
  and size, and Inspector's CLI listing the tools (``--strict``) in the modern and the legacy
  protocol era, and the Python and TypeScript (2.x) SDKs' clients in ``auto`` and ``legacy`` mode.

Traffic goes to 127.0.0.1 only.

    python -m bench.conformance [--requests 10000] [--tools-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx2
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.types import Receive, Scope, Send

from bench.common import free_port, machine, serve_process

PACKAGES = (
    "node@22",
    "@modelcontextprotocol/conformance@0.1.16",
    "@modelcontextprotocol/inspector@2.12.0",
    "@modelcontextprotocol/client@2.3.1",
)
EXPECTED = Path(__file__).with_name("conformance-expected.yaml")
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
APPS = {"extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}}
HOP_BY_HOP = {b"host", b"authorization", b"content-length", b"connection", b"transfer-encoding"}


# --- the tools --------------------------------------------------------------------------------


def install_tools(tools_dir: Path) -> Path:
    """Node 22, the two CLIs and the TypeScript client in ``tools_dir`` (installed once); returns
    its node_modules."""
    modules = tools_dir / "node_modules"
    wanted = [modules / "node" / "bin" / "node", modules / "@modelcontextprotocol" / "conformance"]
    wanted += [modules / "@modelcontextprotocol" / name for name in ("inspector", "client")]
    if not all(path.exists() for path in wanted):
        tools_dir.mkdir(parents=True, exist_ok=True)
        note(f"installing {', '.join(PACKAGES)} into {tools_dir}")
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(tools_dir), *PACKAGES],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return modules


def node_env(modules: Path) -> dict[str, str]:
    """The environment in which ``node`` is Node 22 from the cache (the CLIs run ``node``)."""
    return {**os.environ, "PATH": f"{modules / 'node' / 'bin'}:{modules / '.bin'}:{os.environ['PATH']}"}


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- the proxy that adds the key -----------------------------------------------------------------


class KeyProxy:
    """ASGI app forwarding every request to ``target`` with the API key added.

    A request addressed to the proxy (its own Host and Origin) is re-addressed to the server; any
    other Host or Origin goes on as sent, so the suite's DNS-rebinding checks still reach the
    server's own checks.
    """

    def __init__(self, target: str, key: str, own: str) -> None:
        self.target = target
        self.key = key
        self.own = own.encode()
        self.client = httpx2.AsyncClient(base_url=target, timeout=None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        target_host = self.target.removeprefix("http://").encode()
        headers: list[tuple[bytes, bytes]] = [(b"authorization", f"Bearer {self.key}".encode())]
        for name, value in scope["headers"]:
            if name == b"host":
                headers.append((name, target_host if value == self.own else value))
            elif name == b"origin":
                own_origin = b"http://" + self.own
                headers.append((name, b"http://" + target_host if value == own_origin else value))
            elif name not in HOP_BY_HOP:
                headers.append((name, value))
        path = scope["raw_path"].decode() + (
            f"?{scope['query_string'].decode()}" if scope["query_string"] else ""
        )
        request = self.client.build_request(scope["method"], path, headers=headers, content=body)
        response = await self.client.send(request, stream=True)
        try:
            out = [(k, v) for k, v in response.headers.raw if k.lower() not in HOP_BY_HOP]
            await send({"type": "http.response.start", "status": response.status_code, "headers": out})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()


async def start_proxy(target: str, key: str) -> tuple[uvicorn.Server, asyncio.Task[None], str]:
    port = free_port()
    own = f"127.0.0.1:{port}"
    server = uvicorn.Server(
        uvicorn.Config(
            KeyProxy(target, key, own), host="127.0.0.1", port=port, lifespan="off", log_level="error"
        )
    )
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn sets a flag, it has no event to wait on
        await asyncio.sleep(0.05)
    return server, task, f"http://{own}/mcp"


# --- the runs -------------------------------------------------------------------------------------


async def run_command(args: list[str], env: dict[str, str], limit_s: float) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), limit_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return 124, "timed out"
    return proc.returncode or 0, out.decode(errors="replace")


def read_checks(results: Path) -> tuple[dict[str, Counter[str]], dict[str, str]]:
    """Per scenario, its checks counted by status (SUCCESS, FAILURE, WARNING...), and the first
    failing check's message, from the suite's results."""
    scenarios: dict[str, Counter[str]] = {}
    first_failure: dict[str, str] = {}
    for path in sorted(results.rglob("checks.json")):
        # Folders are named server-<scenario>-<timestamp>.
        scenario = re.sub(r"-\d{4}-\d\d-\d\dT.*$", "", path.parent.name.removeprefix("server-"))
        counts = scenarios.setdefault(scenario, Counter())
        for check in json.loads(path.read_text()):
            counts[check.get("status", "?")] += 1
            if check.get("status") in ("FAILURE", "WARNING"):
                first_failure.setdefault(scenario, str(check.get("errorMessage") or check.get("details")))
    return scenarios, first_failure


def expected_failures() -> dict[str, str]:
    """The scenarios that do not apply, with the reason given beside each (``- name  # why``)."""
    reasons = {}
    for line in EXPECTED.read_text().splitlines():
        match = re.match(r"\s+-\s+([\w-]+)\s*#\s*(.+)", line)
        if match:
            reasons[match.group(1)] = match.group(2).strip()
    return reasons


async def conformance(modules: Path, url: str) -> int:
    cli = modules / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    with tempfile.TemporaryDirectory(prefix="memory-mcp-conformance-") as results:
        args = ["node", str(cli), "server", "--url", url, "--expected-failures", str(EXPECTED), "-o", results]
        code, out = await run_command(args, node_env(modules), limit_s=900)
        scenarios, failures = read_checks(Path(results))
    print("\n## Conformance suite (server mode, @modelcontextprotocol/conformance 0.1.16)")
    expected = expected_failures()
    for scenario, counts in sorted(scenarios.items()):
        verdict = "FAIL" if counts["FAILURE"] else "warn" if counts["WARNING"] else "pass"
        why = f"  (expected: {expected[scenario]})" if scenario in expected else ""
        print(f"{verdict} {scenario}: {dict(counts)}{why}")
        if scenario in failures and scenario not in expected:
            print(f"     {failures[scenario][:160]}")
    # The suite's exit status counts a warning as a failure too.
    unexpected = [s for s, c in scenarios.items() if (c["FAILURE"] or c["WARNING"]) and s not in expected]
    stale = [s for s, c in scenarios.items() if not (c["FAILURE"] or c["WARNING"]) and s in expected]
    print(
        f"suite exit status {code}; failing where it applies: {unexpected or 'none'}; stale: {stale or 'none'}"
    )
    if code:
        print("\n".join(f"  | {line}" for line in out.splitlines()[-15:]))
    return code


def modern_request(
    method: str, key: str, request_id: int, **capabilities: Any
) -> tuple[dict[str, Any], dict[str, str]]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
    }
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {"_meta": meta}}
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    return body, headers


async def tools_list_sizes(base: str, key: str) -> None:
    async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
        print("\n## tools/list for a 2026-07-28 client (characters of JSON)")
        for label, capabilities in (("without MCP Apps", {}), ("with MCP Apps", APPS)):
            body, headers = modern_request("tools/list", key, 1, **capabilities)
            tools = (await http.post("/mcp", json=body, headers=headers)).json()["result"]["tools"]
            print(
                f"{label}: {len(tools)} tools, {len(json.dumps(tools, separators=(',', ':'))):,} characters"
            )


async def many_requests(base: str, key: str, total: int) -> None:
    """``total`` requests, a quarter of each kind; the headers of every response are measured."""
    kinds = ("modern tools/list", "modern subscriptions/listen", "legacy tools/list", "GET /mcp")
    shapes: dict[str, Counter[tuple[int, int]]] = {kind: Counter() for kind in kinds}
    statuses: dict[str, Counter[int]] = {kind: Counter() for kind in kinds}
    legacy = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LEGACY,
    }
    started = time.monotonic()
    async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
        for i in range(total):
            kind = kinds[i % len(kinds)]
            if kind.startswith("modern"):
                body, headers = modern_request(kind.split()[1], key, i)
                if kind.endswith("listen"):
                    body["params"]["notifications"] = {"toolsListChanged": True}
                request = http.build_request("POST", "/mcp", json=body, headers=headers)
            elif kind.startswith("legacy"):
                body = {"jsonrpc": "2.0", "id": i, "method": "tools/list"}
                request = http.build_request("POST", "/mcp", json=body, headers=legacy)
            else:
                request = http.build_request("GET", "/mcp", headers={**legacy, "Accept": "text/event-stream"})
            response = await http.send(request, stream=True)
            items = response.headers.multi_items()
            shapes[kind][(len(items), sum(len(k) + len(v) for k, v in items))] += 1
            statuses[kind][response.status_code] += 1
            await response.aclose()
    elapsed = time.monotonic() - started
    print(f"\n## {total:,} requests ({elapsed:.0f} s): statuses and response headers (count, bytes) per kind")
    for kind in kinds:
        print(f"{kind}: statuses {dict(statuses[kind])}; header shapes {dict(shapes[kind])}")


async def inspector(modules: Path, url: str, key: str) -> int:
    cli = modules / ".bin" / "mcp-inspector"
    print("\n## MCP Inspector CLI 2.12.0, tools/list --strict")
    worst = 0
    for era, extra in (("modern", []), ("legacy", []), ("modern", ["--advertise-apps"])):
        args = [str(cli), "--cli", url, "--transport", "http", "--header", f"Authorization: Bearer {key}"]
        args += ["--method", "tools/list", "--strict", "--protocol-era", era, "--format", "json", *extra]
        code, out = await run_command(args, node_env(modules), limit_s=120)
        try:
            listed = json.loads(out[out.index("{") :])
            count: Any = len(listed.get("result", listed).get("tools", []))
        except ValueError:
            count = "no JSON answer"
        label = f"{era}{' ' + extra[0] if extra else ''}"
        print(f"{label}: exit status {code}, {count} tools")
        if code:
            print("\n".join(f"  | {line}" for line in out.splitlines()[-8:]))
        worst = max(worst, code)
    return worst


async def sdk_clients(url: str, key: str) -> None:
    print("\n## Python SDK client (mcp 2.x), tools/list")
    for mode in ("auto", "legacy"):
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http,
            Client(streamable_http_client(url, http_client=http), mode=mode) as client,
        ):
            tools = (await client.list_tools()).tools
            info = client.server_info
            server = f"{info.name} {info.version}" if info is not None else "unnamed"
            print(f"{mode}: protocol {client.protocol_version}, {len(tools)} tools, server {server}")


async def ts_clients(modules: Path, url: str, key: str) -> None:
    print("\n## TypeScript SDK client 2.x (@modelcontextprotocol/client), tools/list")
    script = Path(__file__).with_name("ts") / "list_tools.mjs"
    env = {
        **node_env(modules),
        "CLIENT_MODULE": str(modules / "@modelcontextprotocol" / "client" / "dist" / "index.mjs"),
    }
    for mode in ("auto", "legacy"):
        code, out = await run_command(["node", str(script), url, key, mode], env, limit_s=120)
        try:
            listed = json.loads(out.strip().splitlines()[-1])
            server = listed["server"]
            print(
                f"{mode}: protocol {listed['version']}, {len(listed['tools'])} tools, "
                f"server {server.get('name')} {server.get('version')}"
            )
        except (ValueError, IndexError, KeyError):
            print(f"{mode}: exit status {code}")
            print("\n".join(f"  | {line}" for line in out.splitlines()[-8:]))


async def run(requests: int, tools_dir: Path) -> int:
    modules = install_tools(tools_dir)
    print(f"# Outside checkers against memory-mcp serve\n{machine()}")
    with serve_process("memory-mcp-conformance-") as (server, data_dir, port):
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        while not (data_dir / "bootstrap-key").exists() or not await ready(base):
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("memory-mcp serve did not start")
            await asyncio.sleep(0.5)
        key = (data_dir / "bootstrap-key").read_text().strip()
        proxy, task, proxy_url = await start_proxy(base, key)
        try:
            suite = await conformance(modules, proxy_url)
        finally:
            proxy.should_exit = True
            await task
        await tools_list_sizes(base, key)
        await many_requests(base, key, requests)
        inspected = await inspector(modules, f"{base}/mcp", key)
        await sdk_clients(f"{base}/mcp", key)
        await ts_clients(modules, f"{base}/mcp", key)
    return 1 if suite or inspected else 0


async def ready(base: str) -> bool:
    try:
        async with httpx2.AsyncClient(timeout=2) as http:
            return (await http.get(f"{base}/readyz")).status_code == 200
    except httpx2.HTTPError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--requests", type=int, default=10_000, help="requests before Inspector lists (10,000)"
    )
    parser.add_argument(
        "--tools-dir",
        type=Path,
        default=Path.home() / ".cache" / "memory-mcp" / "checkers",
        help="where npm installs Node 22 and the CLIs (outside the repository)",
    )
    args = parser.parse_args()
    raise SystemExit(asyncio.run(run(args.requests, args.tools_dir)))


if __name__ == "__main__":
    main()
