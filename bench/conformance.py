"""Outside checkers against a live `memory-mcp serve`: the official MCP conformance suite (both
requirement sets and the authorization server's scenarios), MCP Inspector's CLI and the Python SDK's
client in both of its modes.

Node 22 (npm's `node` package), `@modelcontextprotocol/conformance` and
`@modelcontextprotocol/inspector` are installed with npm into a cache folder outside the
repository (``--tools-dir``, default ``~/.cache/memory-mcp/checkers``), once. The server runs on a
fresh temporary data dir (embedded PostgreSQL, the first-start key). The conformance suite has no
option for a header, so it talks to a small proxy on loopback that adds the API key; Inspector
and the SDK send the key themselves.

What it prints:
- the conformance suite's server scenarios for each requirement set (``--requirements 2026-07-28``
  and ``2025-11-25``, the scenarios each spec revision requires, frozen at its release, plus those
  it runs without scoring), held against ``bench/conformance-expected.yaml`` (each entry, a scenario
  or one check of one, says why it does not apply): a failure or warning that is not listed, or a
  listed one that passes, makes the exit status 1;
- the suite's ``authorization`` scenarios against the built-in authorization server: its metadata,
  and the code grant of a client registered for the suite's callback, signed in and allowed in
  headless Chromium (Debian's, driven by playwright) with the first-start key;
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
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.types import Receive, Scope, Send

from bench.common import free_port, machine, serve_process

PACKAGES = (
    "node@22",
    "@modelcontextprotocol/conformance@0.2.0-alpha.12",
    "@modelcontextprotocol/inspector@2.12.0",
    "@modelcontextprotocol/client@2.3.1",
)
EXPECTED = Path(__file__).with_name("conformance-expected.yaml")
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
CONFORMANCE = "@modelcontextprotocol/conformance 0.2.0-alpha.12"
CHROMIUM = "/usr/bin/chromium"  # Debian's; playwright never downloads a browser here
APPS = {"extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}}
HOP_BY_HOP = {b"host", b"authorization", b"content-length", b"connection", b"transfer-encoding"}


# --- the tools --------------------------------------------------------------------------------


def installed(modules: Path, package: str) -> bool:
    """Whether ``name@version`` (as in PACKAGES) is what ``modules`` holds."""
    name, _, version = package.rpartition("@")
    manifest = modules / name / "package.json"
    if not manifest.exists():
        return False
    found = str(json.loads(manifest.read_text()).get("version", ""))
    return found == version or (name == "node" and found.startswith(version + "."))


def install_tools(tools_dir: Path) -> Path:
    """Node 22, the two CLIs and the TypeScript client in ``tools_dir`` (installed once, and again
    when a pinned version changes); returns its node_modules."""
    modules = tools_dir / "node_modules"
    if not (modules / "node" / "bin" / "node").exists() or not all(installed(modules, p) for p in PACKAGES):
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
    """Exit status and output (stdout and stderr) of a command. The output goes through a file: a
    CLI that calls process.exit() right after a large write loses what a pipe had not taken yet
    (Inspector's 15-tool answer came back cut at 8 KiB)."""
    with tempfile.TemporaryFile() as out:
        proc = await asyncio.create_subprocess_exec(
            *args, env=env, stdout=out, stderr=asyncio.subprocess.STDOUT
        )
        try:
            await asyncio.wait_for(proc.wait(), limit_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return 124, "timed out"
        out.seek(0)
        return proc.returncode or 0, out.read().decode(errors="replace")


def read_checks(results: Path, prefix: str) -> dict[str, list[dict[str, Any]]]:
    """Per scenario, its checks, from the suite's results (folders ``<prefix>-<scenario>-<time>``)."""
    scenarios: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(results.rglob("checks.json")):
        scenario = re.sub(r"-\d{4}-\d\d-\d\dT.*$", "", path.parent.name.removeprefix(f"{prefix}-"))
        scenarios.setdefault(scenario, []).extend(json.loads(path.read_text()))
    return scenarios


def expected_failures() -> dict[str, str]:
    """The entries that do not apply (``scenario`` or ``scenario:check``), with the reason beside
    each (``- entry  # why``)."""
    reasons = {}
    for line in EXPECTED.read_text().splitlines():
        match = re.match(r"\s+-\s+([\w:-]+)\s*#\s*(.+)", line)
        if match:
            reasons[match.group(1)] = match.group(2).strip()
    return reasons


def failing(check: dict[str, Any]) -> bool:
    # The suite's baseline counts a warning as a failure too.
    return check.get("status") in ("FAILURE", "WARNING")


def judge(
    scenario: str, checks: list[dict[str, Any]], expected: dict[str, str]
) -> tuple[list[str], list[str], list[str]]:
    """A scenario's failing checks that are not listed, its listed entries that pass (stale), and
    the reasons of the listed entries that fail as expected."""
    failed = [c for c in checks if failing(c)]
    if scenario in expected:
        return [], ([] if failed else [scenario]), [expected[scenario]]
    unexpected = [f"{scenario}:{c.get('id')}" for c in failed if f"{scenario}:{c.get('id')}" not in expected]
    reasons = [
        expected[f"{scenario}:{c.get('id')}"] for c in failed if f"{scenario}:{c.get('id')}" in expected
    ]
    stale = [
        entry
        for entry in expected
        if entry.startswith(f"{scenario}:")
        and any(f"{scenario}:{c.get('id')}" == entry and c.get("status") == "SUCCESS" for c in checks)
    ]
    return unexpected, stale, reasons


def scored(modules: Path, revision: str) -> set[str]:
    """The server scenarios a revision requires (the suite's frozen requirement set)."""
    path = modules / "@modelcontextprotocol" / "conformance" / "requirements" / f"{revision}.yaml"
    return set(yaml.safe_load(path.read_text()).get("server") or [])


async def conformance(modules: Path, url: str) -> int:
    cli = modules / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    expected = expected_failures()
    worst = 0
    for revision in (MODERN, LEGACY):
        with tempfile.TemporaryDirectory(prefix="memory-mcp-conformance-") as results:
            args = ["node", str(cli), "server", "--url", url, "--requirements", revision]
            args += ["--expected-failures", str(EXPECTED), "-o", results]
            code, out = await run_command(args, node_env(modules), limit_s=1200)
            scenarios = read_checks(Path(results), "server")
        required = scored(modules, revision)
        print(f"\n## Conformance suite, server, --requirements {revision} ({CONFORMANCE})")
        unexpected: list[str] = []
        stale: list[str] = []
        for scenario, checks in sorted(
            scenarios.items(), key=lambda item: (item[0] not in required, item[0])
        ):
            missing, passing, reasons = judge(scenario, checks, expected)
            unexpected += missing
            stale += passing
            counts = Counter(str(c.get("status")) for c in checks)
            verdict = "FAIL" if counts["FAILURE"] else "warn" if counts["WARNING"] else "pass"
            label = "" if scenario in required else " [not scored]"
            why = f"  (expected: {'; '.join(dict.fromkeys(reasons))})" if reasons else ""
            print(f"{verdict} {scenario}{label}: {dict(counts)}{why}")
            for entry in missing:
                message = next(
                    str(c.get("errorMessage") or c.get("details"))
                    for c in checks
                    if f"{scenario}:{c.get('id')}" == entry
                )
                print(f"     {entry}: {message[:160]}")
        passed = sum(1 for s, c in scenarios.items() if s in required and not any(failing(x) for x in c))
        print(
            f"{len(scenarios)} scenarios run, {len([s for s in scenarios if s in required])} scored, "
            f"{passed} of those passing outright; suite exit status {code}; "
            f"failing where it applies: {unexpected or 'none'}; stale: {stale or 'none'}"
        )
        if code:
            print("\n".join(f"  | {line}" for line in out.splitlines()[-15:]))
        worst = max(worst, code, 1 if unexpected or stale else 0)
    return worst


async def authorization(modules: Path, base: str, key: str) -> int:
    """The suite's authorization scenarios against the built-in authorization server: its metadata,
    and the code grant of a public client registered for the suite's callback, whose sign-in page
    a browser fills with ``key`` and whose consent it allows."""
    from playwright.async_api import async_playwright

    cli = modules / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    port = free_port()
    async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
        registered = await http.post(
            "/register",
            json={
                "client_name": "MCP conformance suite",
                "redirect_uris": [f"http://127.0.0.1:{port}/callback"],
            },
        )
        registered.raise_for_status()
        client_id = registered.json()["client_id"]
    print(f"\n## Conformance suite, authorization ({CONFORMANCE}), against {base}/")
    with tempfile.TemporaryDirectory(prefix="memory-mcp-conformance-auth-") as results:
        args = [str(cli), "authorization", "--url", f"{base}/", "--client-id", client_id]
        args += ["--resource", f"{base}/mcp", "--port", str(port), "-o", results]
        proc = await asyncio.create_subprocess_exec(
            "node",
            *args,
            env=node_env(modules),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        assert proc.stdout is not None
        lines: list[str] = []
        try:
            async with asyncio.timeout(300), async_playwright() as playwright:
                browser = await playwright.chromium.launch(
                    executable_path=CHROMIUM,
                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
                )
                try:
                    while line := (await proc.stdout.readline()).decode(errors="replace"):
                        lines.append(line.rstrip())
                        if line.startswith(f"{base}/authorize?"):
                            page = await browser.new_page()
                            await page.goto(line.strip())
                            await page.get_by_label("API key").fill(key)
                            await page.get_by_role("button", name="Continue").click()
                            await page.get_by_role("button", name="Allow").click()
                            await page.wait_for_url(f"http://127.0.0.1:{port}/callback?*")
                            await page.close()
                finally:
                    await browser.close()
            code = await proc.wait()
        except TimeoutError:
            proc.kill()
            code = await proc.wait()
        scenarios = read_checks(Path(results), "authorization-server")
    for scenario, checks in sorted(scenarios.items()):
        counts = Counter(str(c.get("status")) for c in checks)
        verdict = "FAIL" if counts["FAILURE"] else "warn" if counts["WARNING"] else "pass"
        print(f"{verdict} {scenario}: {dict(counts)}")
        for check in filter(failing, checks):
            print(f"     {check.get('id')}: {str(check.get('errorMessage') or check.get('details'))[:160]}")
    bad = [s for s, checks in scenarios.items() if any(map(failing, checks))]
    print(f"{len(scenarios)} scenarios; failing: {bad or 'none'}; suite exit status {code}")
    if code or bad or len(scenarios) < 2:
        print("\n".join(f"  | {line}" for line in lines[-15:]))
    return 1 if code or bad or len(scenarios) < 2 else 0


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
            # The answer, then (with --strict) a portability report when it found anything.
            listed, end = json.JSONDecoder().raw_decode(out, out.index("{"))
            count: Any = len(listed.get("result", listed).get("tools", []))
        except ValueError:
            count, end = "no JSON answer", 0
        report = re.search(r"(\d+) errors?, (\d+) warnings?", out[end:])
        problems = (
            f"{report.group(1)} errors, {report.group(2)} warnings" if report else "no portability problem"
        )
        label = f"{era}{' ' + extra[0] if extra else ''}"
        print(f"{label}: exit status {code}, {count} tools, {problems}")
        if code or report:
            print("\n".join(f"  | {line}" for line in out[end:].strip().splitlines()[:8]))
        worst = max(worst, code, 1 if report else 0)
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
        suite = max(suite, await authorization(modules, base, key))
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
