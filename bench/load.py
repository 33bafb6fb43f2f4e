"""Load harness: N concurrent MCP clients against a running `memory-mcp serve`, per-tool latency.

Starts a server in its own process (embedded PostgreSQL in a temporary data dir, the in-process
embedder), seeds a space, then for 1, 4 and 16 concurrent clients calls each tool for a fixed time
and prints calls/s and p50/p95/p99. Every client is a real MCP client session (initialize, then
tools/call over streamable HTTP); the server is stateless, so each call is one HTTP POST.

Two client implementations, each a closed loop in one process: the Python SDK (``python``) and
the TypeScript SDK on Node.js (``node``, bench/ts/load.mjs). Both validate every result against
the tool's output schema. They share the machine's cores with the server and PostgreSQL, so the
client's own cost is part of every figure: the Python client spends about 5 ms of CPU on a search
result (a third of it JSON-schema validation), the Node client far less. Each run's clock starts
once every session is open and has made one call.

    python -m bench.load [--seconds 8] [--memories 1000] [--clients 1,4,16] [--client python,node]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

TOPICS = [
    "deploy",
    "database",
    "oncall",
    "billing",
    "search",
    "auth",
    "frontend",
    "network",
    "storage",
    "release",
]
VERBS = ["uses", "requires", "prefers", "moved to", "depends on", "was replaced by", "is owned by"]
THINGS = [
    "PostgreSQL 16",
    "the blue cluster",
    "Team Orion",
    "weekly rotations",
    "a canary stage",
    "Grafana alerts",
    "the EU region",
    "feature flags",
    "gRPC",
    "an S3 bucket",
    "Redis",
    "Kafka",
]
QUERIES = [
    "who owns billing?",
    "which database does search use?",
    "how do releases work?",
    "where does the network team deploy?",
    "what does auth depend on?",
    "on-call rotation",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def wait_ready(base: str, limit_s: float = 180) -> None:
    deadline = time.monotonic() + limit_s
    async with httpx2.AsyncClient() as http:
        while time.monotonic() < deadline:
            try:
                if (await http.get(f"{base}/readyz")).status_code == 200:
                    return
            except httpx2.HTTPError:
                pass
            await asyncio.sleep(0.5)
    raise RuntimeError("server did not become ready")


async def seed(base: str, key: str, count: int) -> None:
    rng = random.Random(3)
    async with httpx2.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60
    ) as http:
        sem = asyncio.Semaphore(8)

        async def one(i: int) -> None:
            text = f"The {rng.choice(TOPICS)} service {rng.choice(VERBS)} {rng.choice(THINGS)} (note {i})."
            async with sem:
                r = await http.post("/v1/memories", json={"content": text, "category": rng.choice(TOPICS)})
                r.raise_for_status()

        await asyncio.gather(*(one(i) for i in range(count)))


def argument_choices(tool: str) -> list[dict[str, Any]]:
    """What each call of ``tool`` may send; a client picks one at random per call."""
    if tool == "search_memory":
        return [{"query": q, "includeProfile": False, "limit": 10} for q in QUERIES]
    if tool == "listMemories":
        return [{"page": page, "limit": 10} for page in range(1, 6)]
    return [{}]


NODE_CLIENT = Path(__file__).parent / "ts" / "load.mjs"


async def run_clients(url: str, key: str, tool: str, clients: int, seconds: float) -> list[float]:
    """Latencies (seconds) of ``clients`` Python SDK clients calling ``tool`` in a closed loop.

    The clock starts once every session is open and has made one call (the first call lists the
    tools and compiles the output schema's validator): the figures are the steady state, not
    all sessions starting at once.
    """
    latencies: list[float] = []
    choices = argument_choices(tool)
    warmed = 0
    started_all = asyncio.Event()
    stop_at = 0.0

    async def call(client: Client, rng: random.Random) -> None:
        result = await client.call_tool(tool, rng.choice(choices))
        if result.is_error:
            raise RuntimeError(f"{tool} failed: {result.content}")

    async def client_loop(n: int) -> None:
        nonlocal warmed, stop_at
        rng = random.Random(n)
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            await call(client, rng)
            warmed += 1
            if warmed == clients:
                stop_at = time.perf_counter() + seconds
                started_all.set()
            await started_all.wait()
            while time.perf_counter() < stop_at:
                started = time.perf_counter()
                await call(client, rng)
                latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(client_loop(n) for n in range(clients)))
    return latencies


async def run_node_clients(url: str, key: str, tool: str, clients: int, seconds: float) -> list[float]:
    """The same with the TypeScript SDK client, in a Node.js process of its own."""
    arguments = json.dumps(argument_choices(tool))
    node = await asyncio.create_subprocess_exec(
        "node",
        str(NODE_CLIENT),
        url,
        key,
        tool,
        str(clients),
        str(seconds),
        arguments,
        stdout=subprocess.PIPE,
    )
    out, _ = await node.communicate()
    if node.returncode != 0:
        raise RuntimeError(
            f"the Node.js load client failed (exit {node.returncode}); it uses the TypeScript SDK that "
            "scripts/setup-test-env installs in tests/server/ts_client"
        )
    return [ms / 1000 for ms in json.loads(out)]


RUNNERS = {"python": run_clients, "node": run_node_clients}


async def measure(args: argparse.Namespace, base: str, data_dir: Path) -> None:
    await wait_ready(base)
    key = (data_dir / "bootstrap-key").read_text().strip()
    t0 = time.perf_counter()
    await seed(base, key, args.memories)
    print(f"seeded {args.memories} memories in {time.perf_counter() - t0:.1f}s (REST, embedded on save)")
    # The load generator's own full collections would show up as server latency: its long-lived
    # objects (the SDKs) are set aside once they are loaded.
    gc.collect()
    gc.freeze()
    print(
        f"{'tool':<15}{'client':>8}{'clients':>8}{'calls':>8}{'calls/s':>10}"
        f"{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}"
    )
    for tool in args.tools.split(","):
        for client in args.client.split(","):
            run = RUNNERS[client]
            await run(f"{base}/mcp", key, tool, 2, 1.0)  # warm-up: caches, pool, prepared statements
            for clients in (int(c) for c in args.clients.split(",")):
                lat = await run(f"{base}/mcp", key, tool, clients, args.seconds)
                print(
                    f"{tool:<15}{client:>8}{clients:>8}{len(lat):>8}{len(lat) / args.seconds:>10.1f}"
                    f"{statistics.median(lat) * 1000:>9.1f}{percentile(lat, 0.95) * 1000:>9.1f}"
                    f"{percentile(lat, 0.99) * 1000:>9.1f}",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--tools", default="whoAmI,search_memory,listMemories")
    parser.add_argument("--client", default="python,node", help="python, node or both (comma-separated)")
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="memory-mcp-load-"))
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "memory_mcp.cli", "serve", "--data-dir", str(data_dir), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "MEMORY_MCP_LOG_LEVEL": "warning"},
    )
    try:
        asyncio.run(measure(args, f"http://127.0.0.1:{port}", data_dir))
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
