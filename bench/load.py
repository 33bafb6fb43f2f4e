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
once every session is open and has made one call. The last two columns are the CPU time the
server process and PostgreSQL spent per call during the run (Linux: read from /proc).

    python -m bench.load [--seconds 8] [--memories 1000] [--clients 1,4,16] [--client python,node]
    python -m bench.load --tools add_memory --client python      # concurrent saves
    python -m bench.load --cold          # before autovacuum's first statistics of the seeded space
    python -m bench.load --tools search_memory --questions varied   # every search a new question
    python -m bench.load --tools search_memory,whoAmI --clients 1,16 --memories 100000 \
        --space generated --vectors /tmp/search_cost.npz    # a space of 100,000 real memories
    python -m bench.load --tools search_memory,search+profile --clients 1   # the profile's own cost

By default the space holds short sentences made from a few templates, saved through REST (each
embedded on save), and searches ask six fixed questions, whose vectors the embedder's LRU keeps
after the first call: the figures leave the query's embedding out. ``--space generated`` fills it
as ``bench.search_cost`` does instead, so that a large space takes minutes, not hours: the
generated dataset's texts with the model's vectors (kept in ``--vectors FILE.npz``, one file a
size, shared with ``bench.search_cost``), COPYed into the server's database by its schema owner
with the indexes built after, in sessions of thirty by one writer; searches then ask that
dataset's 200 questions, each asked once before the clock starts (their vectors cached, as above).
``search_memory`` asks without the space's profile (``includeProfile`` false);
``search+profile`` is the same search with it, as MCP's ``search_memory`` answers by default.
``--questions varied`` asks the generated dataset's questions (bench/retrieval_dataset.py,
thousands of distinct ones), each at most once by the Python client (the Node client picks at
random among them), so every search embeds its question.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bench.common import serve_process

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


class CpuMeter:
    """CPU seconds used so far by the server process and by PostgreSQL, read from /proc (Linux).

    PostgreSQL is the postmaster of the server's embedded cluster, the backends it has now, and
    those it has reaped. Elsewhere ``read`` returns None and the columns print as "-". The span
    runs from the clock's start until the clients have closed their sessions.
    """

    def __init__(self, server_pid: int, pg_dir: Path) -> None:
        self.server_pid = server_pid
        self.pg_dir = pg_dir
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.started: tuple[float, float] | None = None

    def start(self) -> None:
        self.started = self.read()

    def per_call(self, calls: int) -> str:
        """Server and PostgreSQL CPU milliseconds per call since ``start``, as two columns."""
        now, then = self.read(), self.started
        self.started = None
        if now is None or then is None or not calls:
            return f"{'-':>8}{'-':>6}"
        return f"{(now[0] - then[0]) * 1000 / calls:>8.2f}{(now[1] - then[1]) * 1000 / calls:>6.2f}"

    def _stat(self, pid: int | str) -> list[str]:
        # Fields after the parenthesised command name: [1] ppid, [11..14] utime stime cutime cstime.
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()

    def read(self) -> tuple[float, float] | None:
        try:
            server = self._stat(self.server_pid)
            postmaster = (self.pg_dir / "postmaster.pid").read_text().split()[0]
            ticks = sum(int(v) for v in self._stat(postmaster)[11:15])
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    try:
                        fields = self._stat(entry.name)
                    except OSError:
                        continue  # ended while the list was read
                    if fields[1] == postmaster:
                        ticks += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            return None
        return (int(server[11]) + int(server[12])) / self.tick, ticks / self.tick


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


def varied_questions(count: int = 5000) -> list[str]:
    """Distinct questions of the generated dataset, shuffled."""
    from bench.retrieval_dataset import build_dataset

    found: dict[str, None] = {}
    seed = 7
    while len(found) < count and seed < 40:
        found.update((q.text, None) for q in build_dataset(seed, 1).queries if q.text is not None)
        seed += 1
    questions = list(found)
    random.Random(5).shuffle(questions)
    return questions


QUESTIONS = {"fixed": lambda: QUERIES, "varied": varied_questions}


# Calls measured that are not a tool's own name: a search that asks for the space's profile beside
# its results, as MCP's search_memory does unless told otherwise (``search_memory`` here does not).
TOOL_OF = {"search+profile": "search_memory"}


def tool_of(call: str) -> str:
    return TOOL_OF.get(call, call)


def argument_choices(tool: str, questions: str = "fixed") -> list[dict[str, Any]]:
    """What each call of ``tool`` may send; a client picks one at random per call (a search with
    ``varied`` questions takes the next one instead: see ``arguments``)."""
    if tool_of(tool) == "search_memory":
        profile = tool == "search+profile"
        return [{"query": q, "includeProfile": profile, "limit": 10} for q in QUESTIONS[questions]()]
    if tool == "listMemories":
        return [{"page": page, "limit": 10} for page in range(1, 6)]
    if tool == "add_memory":
        return [{"category": topic} for topic in TOPICS]  # the content is new on every call
    return [{}]


def arguments(
    tool: str,
    choices: list[dict[str, Any]],
    rng: random.Random,
    fresh: Iterator[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One call's arguments; a save gets a sentence no earlier call saved (a duplicate is a lookup),
    and a search with ``fresh`` questions the next of them (no repeats until they run out)."""
    args = dict(next(fresh) if fresh is not None else rng.choice(choices))
    if tool == "add_memory":
        args["content"] = (
            f"The {rng.choice(TOPICS)} service {rng.choice(VERBS)} {rng.choice(THINGS)} "
            f"since change {uuid.uuid4().hex[:12]}."
        )
    return args


NODE_CLIENT = Path(__file__).parent / "ts" / "load.mjs"


async def run_clients(
    url: str,
    key: str,
    tool: str,
    clients: int,
    seconds: float,
    on_start: Callable[[], None] = lambda: None,
    questions: str = "fixed",
) -> list[float]:
    """Latencies (seconds) of ``clients`` Python SDK clients calling ``tool`` in a closed loop.

    The clock starts once every session is open and has made one call (the first call lists the
    tools and compiles the output schema's validator): the figures are the steady state, not
    all sessions starting at once. ``on_start`` runs when the clock starts.
    """
    latencies: list[float] = []
    choices = argument_choices(tool, questions)
    fresh = FRESH.get(questions) if tool_of(tool) == "search_memory" else None
    warmed = 0
    started_all = asyncio.Event()
    stop_at = 0.0

    async def call(client: Client, rng: random.Random) -> None:
        result = await client.call_tool(tool_of(tool), arguments(tool, choices, rng, fresh))
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
                on_start()
                stop_at = time.perf_counter() + seconds
                started_all.set()
            await started_all.wait()
            while time.perf_counter() < stop_at:
                started = time.perf_counter()
                await call(client, rng)
                latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(client_loop(n) for n in range(clients)))
    return latencies


async def run_node_clients(
    url: str,
    key: str,
    tool: str,
    clients: int,
    seconds: float,
    on_start: Callable[[], None] = lambda: None,
    questions: str = "fixed",
) -> list[float]:
    """The same with the TypeScript SDK client, in a Node.js process of its own."""
    # On its standard input: thousands of varied questions are longer than a command line may be.
    arguments = json.dumps(argument_choices(tool, questions)).encode()
    node = await asyncio.create_subprocess_exec(
        "node",
        str(NODE_CLIENT),
        url,
        key,
        tool_of(tool),
        str(clients),
        str(seconds),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert node.stdin is not None and node.stderr is not None
    node.stdin.write(arguments)
    await node.stdin.drain()
    node.stdin.close()
    before = b""  # anything Node.js writes before the script's clock starts (warnings, a failure)
    async for line in node.stderr:
        if line.strip() == b"started":
            on_start()
            break
        before += line
    out, err = await node.communicate()
    if node.returncode != 0:
        raise RuntimeError(
            f"the Node.js load client failed (exit {node.returncode}): {(before + err).decode().strip()[:1500]}\n"
            "It uses the TypeScript SDK that scripts/setup-test-env installs in tests/server/ts_client."
        )
    return [ms / 1000 for ms in json.loads(out)]


RUNNERS = {"python": run_clients, "node": run_node_clients}
# The Python client's varied questions, shared by every run of one process: none is asked twice.
FRESH: dict[str, Iterator[dict[str, Any]]] = {}


def analyze(data_dir: Path) -> None:
    """Statistics of the seeded tables, as autovacuum gathers them within a minute of a load: without
    them the planner reads the whole space for each of a search's neighbour lookups (a search at 300
    memories took twice as long in the first minute)."""
    import psycopg

    from memory_mcp.store.embedded import EmbeddedPostgres

    pg = EmbeddedPostgres(data_dir)  # the server's own PostgreSQL, already running
    pg.start()
    try:
        with psycopg.connect(pg.owner_url, autocommit=True) as conn:
            conn.execute("ANALYZE")
    finally:
        pg.stop()


def fill_generated(base: str, key: str, data_dir: Path, size: int, vectors: Path | None) -> list[str]:
    """Fill the key's default space as ``bench.search_cost`` fills its own (see the module's
    docstring); returns the questions to ask. One memory saved through REST first makes the space
    and says whose it is; it stays, one of ``size + 1``."""
    import psycopg

    from bench import search_cost
    from memory_mcp.core.settings import Settings
    from memory_mcp.embedder.model import load_model
    from memory_mcp.embedder.static import load_static_model
    from memory_mcp.store.embedded import EmbeddedPostgres

    texts, categories, questions = search_cost.texts_and_questions(size, 200)
    cache = None if vectors is None else vectors.with_suffix(f".{size}.npz")
    settings = Settings()
    model = load_model(None)
    rows, _ = search_cost.model_vectors(model, texts, questions, cache)
    statics = load_static_model(settings.static_embedding_cache_dir).encode(texts)
    with httpx2.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        http.post("/v1/memories", json={"content": "The load bench fills this space."}).raise_for_status()
    pg = EmbeddedPostgres(data_dir)  # the server's own PostgreSQL, already running
    pg.start()
    try:
        with psycopg.connect(pg.superuser_url.replace("+psycopg", "")) as conn:
            row = conn.execute("SELECT space_id, created_by_user_id FROM memories").fetchone()
        assert row is not None, "the memory saved through REST is not in the database"
        space, writer = row
        search_cost.load(
            pg.owner_url.replace("+psycopg", ""), space, writer, texts, categories, rows, statics
        )
    finally:
        pg.stop()
    return questions


async def ask_each(url: str, key: str, questions: str) -> None:
    """Each search of ``questions`` once, one after another: the server's LRU then holds their
    vectors."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        for arguments in argument_choices("search_memory", questions):
            result = await client.call_tool("search_memory", arguments)
            if result.is_error:
                raise RuntimeError(f"search_memory failed: {result.content}")


async def measure(args: argparse.Namespace, base: str, data_dir: Path, meter: CpuMeter) -> None:
    await wait_ready(base)
    key = (data_dir / "bootstrap-key").read_text().strip()
    t0 = time.perf_counter()
    if args.space == "generated":
        questions = fill_generated(base, key, data_dir, args.memories, args.vectors)
        QUESTIONS["generated"] = lambda: questions
        args.questions = "generated"
        await ask_each(f"{base}/mcp", key, args.questions)
        print(
            f"filled {args.memories} memories and asked each question once in {time.perf_counter() - t0:.0f}s"
        )
    else:
        await seed(base, key, args.memories)
        print(f"seeded {args.memories} memories in {time.perf_counter() - t0:.1f}s (REST, embedded on save)")
        if not args.cold:
            analyze(data_dir)
    # The load generator's own full collections would show up as server latency: its long-lived
    # objects (the SDKs) are set aside once they are loaded.
    gc.collect()
    gc.freeze()
    print(
        f"{'tool':<15}{'client':>8}{'clients':>8}{'calls':>8}{'calls/s':>10}"
        f"{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'server':>8}{'pg':>6}   (CPU ms a call)"
    )
    for tool in args.tools.split(","):
        for client in args.client.split(","):
            run = RUNNERS[client]
            await run(f"{base}/mcp", key, tool, 2, 1.0, questions=args.questions)  # warm-up: caches, pool
            for clients in (int(c) for c in args.clients.split(",")):
                lat = await run(f"{base}/mcp", key, tool, clients, args.seconds, meter.start, args.questions)
                print(
                    f"{tool:<15}{client:>8}{clients:>8}{len(lat):>8}{len(lat) / args.seconds:>10.1f}"
                    f"{statistics.median(lat) * 1000:>9.1f}{percentile(lat, 0.95) * 1000:>9.1f}"
                    f"{percentile(lat, 0.99) * 1000:>9.1f}{meter.per_call(len(lat))}",
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
    parser.add_argument(
        "--cold",
        action="store_true",
        help="measure before the tables have statistics (no ANALYZE after seeding)",
    )
    parser.add_argument(
        "--questions",
        choices=sorted(QUESTIONS),
        default="fixed",
        help="search: six fixed questions (their vectors cached after the first call) or varied ones",
    )
    parser.add_argument(
        "--space",
        choices=("templates", "generated"),
        default="templates",
        help="what the space holds: template sentences saved through REST, or the generated dataset COPYed in",
    )
    parser.add_argument(
        "--vectors", type=Path, metavar="FILE.npz", help="--space generated: keep the model's vectors here"
    )
    args = parser.parse_args()
    if args.questions == "varied":
        FRESH["varied"] = iter(argument_choices("search_memory", "varied"))
    # stdout is a pipe that nobody reads: the server prints only its start lines there.
    with serve_process("memory-mcp-load-", stdout=subprocess.PIPE) as (server, data_dir, port):
        meter = CpuMeter(server.pid, data_dir / "pg")
        asyncio.run(measure(args, f"http://127.0.0.1:{port}", data_dir, meter))


if __name__ == "__main__":
    main()
