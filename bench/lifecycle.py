"""Saves retried by clients: duplicates with and without ``idempotencyKey``, and what a key costs.

Two ``memory-mcp serve`` processes on one database (two pods). Eight clients save facts over REST;
each save "times out": a random 0-30 ms after sending it the client sends it again, reworded as a
model retrying would ("... (retried)"), to the other server, while the first is still in flight.
Every save means one memory, so every row beyond the saves made is a duplicate. Then the p50 of a
save with a key against one without, one client, alternating on one server.

    python -m bench.lifecycle [--saves 2000] [--control 400] [--latency 200]
    python -m bench.lifecycle --store-only 300     # the store's save alone, with and without a key
    python -m bench.lifecycle --webhooks 20        # saves at 50/s: webhooks off, then on
    python -m bench.lifecycle --durability [--receiver-down 60]
                                                   # kill -9 of the delivering server; receiver down

``--durability``: saves at 50/s (the store's save, no embedding, started on time whatever the last
took) while a real ``memory-mcp serve`` delivers the space's webhook to a loopback receiver (a
process of its own). First to a space without a webhook (the save p50 "without"), then to a new
space with one while the receiver is down (killed: its port closed) for ``--receiver-down``
seconds, then a kill -9 of the server halfway through 20 s of saves and another server started on
the same database. Each counts the saves whose event never arrived (lost), events that arrived
more than once (duplicates) and first arrivals out of the delivery order (out of order), and the
dead letters; the outage also the time from the receiver's return to its having every event of
the saves made before.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx2
import psutil
import psycopg

from bench.common import bench_server, free_port, machine, percentile, serve_process
from bench.ingest import wait_ready
from memory_mcp.store import apikeys, memories, spaces, users
from memory_mcp.store.access import Access, Role
from memory_mcp.store.apikeys import GrantSpec
from memory_mcp.store.db import Database
from memory_mcp.store.models import SpaceContext

CLIENTS = 8


SPACES = ("retries", "control")


async def _key(url: str) -> str:
    """A Writer's key to both spaces."""
    db = Database(url, pool_size=2)
    try:
        for space in SPACES:
            await spaces.upsert_space(db, space, space.title())
        await users.upsert_user(db, "bench", "bench@example.com", "Bench", Role.WRITER, True)
        grants = [GrantSpec(space, Access.READ_WRITE) for space in SPACES]
        _, key = await apikeys.create_key(db, "bench-key", "bench", grants, SPACES[0])
        return key
    finally:
        await db.close()


@contextmanager
def _serve(database_url: str) -> Iterator[str]:
    """A ``memory-mcp serve`` process on ``database_url``; yields its base URL."""
    with serve_process("memory-mcp-lifecycle-", extra_args=("--database-url", database_url)) as (
        server,
        _,
        port,
    ):
        base = f"http://127.0.0.1:{port}"
        wait_ready(base, server)
        yield base


def _rows(dsn: str, space: str) -> int:
    """Every memory row of the space, versions included (as the superuser: past row-level security)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM memories m JOIN spaces s ON s.id = m.space_id WHERE s.key = %s", (space,)
        ).fetchone()
    assert row is not None
    return int(row[0])


async def retried_saves(bases: list[str], key: str, space: str, saves: int, keyed: bool) -> float:
    """``saves`` saves by CLIENTS clients, each sent twice (the retry to the other server)."""
    auth = {"Authorization": f"Bearer {key}"}
    per_client = saves // CLIENTS
    rng = random.Random(7)

    async def client(n: int, http: list[httpx2.AsyncClient]) -> None:
        for i in range(per_client):
            fact = (
                f"Build agent {n}-{i} ({uuid.uuid4().hex[:6]}) runs the {space} nightly job on rack {i % 17}."
            )
            extra = {"containerTag": space, **({"idempotencyKey": f"{n}-{i}"} if keyed else {})}
            first = asyncio.create_task(http[i % 2].post("/v1/memories", json={"content": fact, **extra}))
            await asyncio.sleep(rng.uniform(0, 0.03))  # the client's timeout: it retries, reworded
            retry = http[(i + 1) % 2].post("/v1/memories", json={"content": f"{fact} (retried)", **extra})
            for answer in await asyncio.gather(first, retry):
                answer.raise_for_status()

    started = time.perf_counter()
    clients = [
        [httpx2.AsyncClient(base_url=b, headers=auth, timeout=120) for b in bases] for _ in range(CLIENTS)
    ]
    try:
        await asyncio.gather(*(client(n, clients[n]) for n in range(CLIENTS)))
    finally:
        for pair in clients:
            for c in pair:
                await c.aclose()
    return time.perf_counter() - started


async def latency(base: str, key: str, n: int) -> tuple[list[float], list[float]]:
    plain: list[float] = []
    keyed: list[float] = []
    async with httpx2.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60
    ) as http:
        for i in range(n):
            for times, extra in ((plain, {}), (keyed, {"idempotencyKey": f"lat-{i}"})):
                body = {
                    "content": f"Latency probe {i} {uuid.uuid4().hex[:8]}: the {len(times)}th fact.",
                    **extra,
                }
                started = time.perf_counter()
                (await http.post("/v1/memories", json=body)).raise_for_status()
                times.append((time.perf_counter() - started) * 1000)
    return plain, keyed


async def store_latency(url: str, n: int) -> tuple[list[float], list[float]]:
    """The store's save alone (no HTTP, no embedding), with and without a key, alternating."""
    from memory_mcp.store import identity

    key = await _key(url)
    db = Database(url, pool_size=2)
    plain: list[float] = []
    keyed: list[float] = []
    try:
        ctx = identity.resolve_space(await identity.authenticate(db, key), "control")
        for i in range(n):
            for times, idem in ((plain, None), (keyed, f"store-{i}")):
                started = time.perf_counter()
                await memories.save_memory(
                    db, ctx, f"Store probe {i} {uuid.uuid4().hex[:8]}.", idempotency_key=idem
                )
                times.append((time.perf_counter() - started) * 1000)
    finally:
        await db.close()
    return plain, keyed


async def webhook_latency(
    url: str, seconds: float, rate: float, hooked: bool
) -> tuple[list[float], list[float]]:
    """Saves at ``rate`` a second for ``seconds`` (the store's save, no embedding); with ``hooked``,
    a webhook on the space, delivered by the server's loop (``deliver_next`` every 0.5 s) to a
    loopback receiver in a process of its own (``Receiver``: its threads would otherwise take this
    process's interpreter from the saves). Returns the saves' latencies and each event's
    commit-to-receipt delay (ms)."""
    from datetime import UTC, datetime

    from memory_mcp.server.app import WEBHOOK_POLL_INTERVAL_S
    from memory_mcp.server.webhook_sender import sender
    from memory_mcp.store import identity, webhooks

    key = await _key(url)
    db = Database(url, pool_size=4)
    saved: dict[str, float] = {}
    save_ms: list[float] = []
    stop = asyncio.Event()

    async def deliver() -> None:
        send = sender(allow_loopback=True)
        while not stop.is_set():
            await asyncio.sleep(WEBHOOK_POLL_INTERVAL_S)
            while await webhooks.deliver_next(db, send, datetime.now(UTC)):
                pass

    with tempfile.TemporaryDirectory() as folder:
        receiver = Receiver(folder)
        try:
            ctx = identity.resolve_space(await identity.authenticate(db, key), "retries")
            loop = None
            if hooked:
                await asyncio.to_thread(receiver.up)
                await webhooks.add_webhook(db, "retries", receiver.url, "bench")
                loop = asyncio.create_task(deliver())
            started = time.perf_counter()
            for i in range(int(seconds * rate)):
                await asyncio.sleep(max(0.0, started + i / rate - time.perf_counter()))
                t0 = time.perf_counter()
                result = await memories.save_memory(db, ctx, f"Webhook probe {i} {uuid.uuid4().hex[:8]}.")
                save_ms.append((time.perf_counter() - t0) * 1000)
                saved[str(result.memory.id)] = time.time()
            if loop is not None:
                deadline = time.monotonic() + 60
                while len(receiver.received()) < len(saved) and time.monotonic() < deadline:  # noqa: ASYNC110 - another process: its log is read
                    await asyncio.sleep(0.1)
                stop.set()
                await loop
        finally:
            await db.close()
            receiver.down()
        arrived = receiver.arrived_at
    delays = [(arrived[m] - t) * 1000 for m, t in saved.items() if m in arrived]
    return save_ms, delays


# The receiver: a process of its own (its threads must not take the saving process's interpreter)
# that imports only the standard library (a start costs no CPU the saves would miss). Every POST is
# one line "event-id memory-id arrival-time" in the log, written and flushed before the 204, so
# nothing it answered is missing when it is killed.
_RECEIVER = """
import json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
lock = threading.Lock()
out = open(sys.argv[2], "a")
class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        with lock:
            out.write(self.headers["webhook-id"].removeprefix("msg_") + " " + body["data"]["id"] + " " + repr(time.time()) + "\\n")
            out.flush()
        self.send_response(204)
        self.end_headers()
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


class Receiver:
    """A loopback webhook receiver (``_RECEIVER``) that can go down (killed: its port closed) and
    come back on the same port. Its arrivals, in order: (event id from ``webhook-id``, memory id)."""

    def __init__(self, folder: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.log = os.path.join(folder, "arrivals")
        self._process: subprocess.Popen[bytes] | None = None
        self._arrivals: list[tuple[int, str]] = []
        self._received: set[str] = set()
        self.arrived_at: dict[str, float] = {}  # memory id: when it first arrived (time.time())
        self._read = 0  # bytes of the log read so far

    def up(self) -> None:
        """Start it and wait until it answers (blocking: call it in a thread)."""
        self._process = subprocess.Popen([sys.executable, "-c", _RECEIVER, str(self.port), self.log])
        while not _answers(self.url, method="HEAD", ok=501):  # it answers POST only
            if self._process.poll() is not None:
                raise RuntimeError("the receiver did not start")
            time.sleep(0.05)

    def down(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    @property
    def arrivals(self) -> list[tuple[int, str]]:
        """Every arrival so far (the log read on from where the last call stopped)."""
        if os.path.exists(self.log):
            with open(self.log, "rb") as log:
                log.seek(self._read)
                new = log.read()
            complete = new[: new.rfind(b"\n") + 1]
            self._read += len(complete)
            for line in complete.decode().splitlines():
                event, memory, at = line.split()
                self._arrivals.append((int(event), memory))
                self._received.add(memory)
                self.arrived_at.setdefault(memory, float(at))
        return self._arrivals

    def received(self) -> set[str]:
        self.arrivals  # noqa: B018 - reads what came in since the last call
        return self._received


@dataclass
class Flow:
    """Saves made at a steady rate: each memory's id, and each save's latency (ms)."""

    saved: list[str] = field(default_factory=list)
    save_ms: list[float] = field(default_factory=list)


async def steady_saves(
    db: Database, ctx: SpaceContext, seconds: float, rate: float, flow: Flow, label: str
) -> None:
    """Saves started at ``rate`` a second for ``seconds`` whatever each takes (an open loop: a slow
    save does not slow the rate), the store's save without embedding, into ``flow``."""

    async def save(i: int) -> None:
        t0 = time.perf_counter()
        result = await memories.save_memory(db, ctx, f"Durability {label} {i} {uuid.uuid4().hex[:8]}.")
        flow.save_ms.append((time.perf_counter() - t0) * 1000)
        flow.saved.append(str(result.memory.id))

    started = time.perf_counter()
    running = []
    for i in range(int(seconds * rate)):
        await asyncio.sleep(max(0.0, started + i / rate - time.perf_counter()))
        running.append(asyncio.create_task(save(i)))
    await asyncio.gather(*running)


async def every_event_in(receiver: Receiver, memory_ids: list[str], within: float) -> float | None:
    """Seconds until the receiver holds an event of every memory in ``memory_ids``; None if not within."""
    started = time.monotonic()
    wanted = set(memory_ids)
    while time.monotonic() - started < within:
        if wanted <= receiver.received():
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    return None


def delivery_counts(receiver: Receiver, memory_ids: list[str], dsn: str, since: int = 0) -> str:
    """Lost, duplicated and out-of-order events among the receiver's arrivals from index ``since``.

    Out of order: the first arrival of an event that comes after an event it precedes in the
    delivery order (writing transaction, then id; concurrent saves commit out of id order)."""
    arrivals = receiver.arrivals[since:]
    got = {memory for _, memory in arrivals}
    lost = sum(1 for m in memory_ids if m not in got)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT id, txid::text::numeric FROM audit_events WHERE id = ANY(%s)",
            ([event for event, _ in arrivals],),
        ).fetchall()
    position = {int(event): (int(txid), int(event)) for event, txid in rows}
    seen: set[int] = set()
    newest: tuple[int, int] = (-1, -1)
    late = 0
    for event, _ in arrivals:
        if event in seen:
            continue
        seen.add(event)
        late += position[event] < newest
        newest = max(newest, position[event])
    return (
        f"{len(memory_ids)} saves, {lost} lost, {len(arrivals) - len(seen)} duplicates, {late} out of order"
    )


@contextmanager
def _delivering_server(owner_url: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A ``memory-mcp serve`` on the database (its webhook loop delivers); yields its URL and process.

    Its embedder is remote and absent, as a pod's is while the embedding service is away: the
    saves here carry no embedding, and a local embedder would embed every one of them in the
    background (both cores for minutes: the save p50 went from 20 ms to 68 ms between two phases)."""
    absent = f"http://127.0.0.1:{free_port()}"
    args = ("--database-url", owner_url, "--embedder", absent)
    with serve_process("memory-mcp-durability-", extra_args=args) as (server, _, port):
        base = f"http://127.0.0.1:{port}"
        # /healthz, not /readyz: without an embedder the server never says ready to MCP traffic,
        # but it serves and its webhook loop runs.
        deadline = time.monotonic() + 300
        while not _answers(f"{base}/healthz"):
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("the server did not start")
            time.sleep(0.2)
        yield base, server


def _cpu_s(process: subprocess.Popen[bytes]) -> float:
    """CPU seconds (user and system) the process has used so far."""
    used = psutil.Process(process.pid).cpu_times()
    return float(used.user + used.system)


def _answers(url: str, method: str = "GET", ok: int = 200) -> bool:
    try:
        return httpx2.request(method, url).status_code == ok
    except httpx2.HTTPError:
        return False


async def durability(owner_url: str, app_url: str, dsn: str, down_s: float, rate: float = 50.0) -> None:
    """The runs of ``--durability`` (see the module's text); prints their figures.

    The saves without a webhook and those with the receiver down go to two new spaces, the same
    number to each, so both start empty (a save's cost grows with its space); the kill -9 comes
    last, on the first space with a webhook added."""
    from memory_mcp.store import identity, webhooks

    # The server sends to loopback only where the client-metadata setting allows it (tests, benches).
    os.environ["MEMORY_MCP_OAUTH_CIMD_ALLOW_LOOPBACK"] = "true"
    key = await _key(app_url)
    db = Database(app_url, pool_size=8)
    folder = tempfile.mkdtemp(prefix="memory-mcp-receiver-")
    receiver = Receiver(folder)
    await asyncio.to_thread(receiver.up)
    edge_s = 10.0
    seconds = down_s + 2 * edge_s
    try:
        caller = await identity.authenticate(db, key)
        plain, hooked_space = (
            identity.resolve_space(caller, "control"),
            identity.resolve_space(caller, "retries"),
        )
        with contextlib.ExitStack() as servers:
            server = servers.enter_context(_delivering_server(owner_url))[1]
            off = Flow()
            cpu = _cpu_s(server)
            await steady_saves(db, plain, seconds, rate, off, "off")
            cpu_off = _cpu_s(server) - cpu

            # The receiver down for down_s while saves go on, then back.
            await webhooks.add_webhook(db, "retries", receiver.url, "bench")
            since = len(receiver.arrivals)
            on = Flow()
            cpu = _cpu_s(server)
            saves = asyncio.create_task(steady_saves(db, hooked_space, seconds, rate, on, "down"))
            await asyncio.sleep(edge_s)
            receiver.down()
            await asyncio.sleep(down_s)
            await asyncio.to_thread(receiver.up)
            backlog = list(on.saved)
            drained = await every_event_in(receiver, backlog, 300)
            await saves
            cpu_on = _cpu_s(server) - cpu
            waited = await every_event_in(receiver, on.saved, 300)
            letters = await webhooks.dead_letters(db, "retries")
            print(
                f"receiver down {down_s:.0f} s during saves at {rate:.0f}/s: "
                f"{delivery_counts(receiver, on.saved, dsn, since)}, {len(letters)} dead letters; the "
                f"{len(backlog)} events before its return all in "
                f"{drained if drained is None else round(drained, 1)} s after it (every event "
                f"{'not ' if waited is None else ''}in); save p50 {statistics.median(off.save_ms):.2f} ms "
                f"without a webhook, {statistics.median(on.save_ms):.2f} ms with one "
                f"(p99 {percentile(off.save_ms, 99):.1f} and {percentile(on.save_ms, 99):.1f} ms); "
                f"the delivering server's CPU over those saves: {cpu_off:.1f} s without, {cpu_on:.1f} s with"
            )

            # A kill -9 of the delivering server halfway through 2 x edge_s of saves.
            await webhooks.add_webhook(db, "control", receiver.url, "bench")
            since = len(receiver.arrivals)
            killed = Flow()
            saves = asyncio.create_task(steady_saves(db, plain, 2 * edge_s, rate, killed, "kill"))
            await asyncio.sleep(edge_s)
            server.kill()
            server.wait()
            at_kill = len(killed.saved)
            restart = time.monotonic()
            await asyncio.to_thread(servers.enter_context, _delivering_server(owner_url))
            restart_s = time.monotonic() - restart
            await saves
            waited = await every_event_in(receiver, killed.saved, 180)
            print(
                f"kill -9 of the delivering server after {at_kill} of {len(killed.saved)} saves at {rate:.0f}/s, "
                f"another serving {restart_s:.1f} s later: {delivery_counts(receiver, killed.saved, dsn, since)}; "
                f"every event in {waited if waited is None else round(waited, 1)} s after the last save"
            )
    finally:
        await db.close()
        receiver.down()
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--saves", type=int, default=2000, help="saves with keys (0: none)")
    parser.add_argument("--control", type=int, default=400, help="saves without keys (0: none)")
    parser.add_argument("--latency", type=int, default=200, help="saves of each kind timed")
    parser.add_argument("--store-only", type=int, default=0, help="only time N store saves of each kind")
    parser.add_argument(
        "--webhooks",
        type=float,
        default=0,
        help="only: saves at 50/s for this many seconds, webhooks off then on",
    )
    parser.add_argument(
        "--durability",
        action="store_true",
        help="only: a kill -9 of the delivering server, then the receiver down (see --receiver-down)",
    )
    parser.add_argument(
        "--receiver-down", type=float, default=60, help="seconds the receiver is down in --durability"
    )
    args = parser.parse_args()
    print(f"machine: {machine()}")
    if args.durability:
        with bench_server() as pg:
            database = pg.database("durability")
            every_row = pg.superuser_dsn.replace("/memory_mcp?", f"/{database.name}?")
            asyncio.run(durability(database.owner_url, database.app_url, every_row, args.receiver_down))
        return
    if args.webhooks:
        with bench_server() as pg:
            off, _ = asyncio.run(webhook_latency(pg.database("off").app_url, args.webhooks, 50, hooked=False))
            on, delays = asyncio.run(
                webhook_latency(pg.database("on").app_url, args.webhooks, 50, hooked=True)
            )
        print(
            f"webhooks, saves at 50/s for {args.webhooks:.0f} s (store save, no embedding): save p50 "
            f"{statistics.median(off):.2f} ms off, {statistics.median(on):.2f} ms on; {len(delays)} of {len(on)} "
            f"events received, commit to receipt p50 {statistics.median(delays):.0f} ms, "
            f"p99 {percentile(delays, 99):.0f} ms"
        )
        return
    if args.store_only:
        with bench_server() as pg:
            plain, keyed = asyncio.run(store_latency(pg.database("store").app_url, args.store_only))
        print(
            f"store save p50, {args.store_only} of each alternating: plain {statistics.median(plain):.2f} ms, "
            f"with idempotencyKey {statistics.median(keyed):.2f} ms"
        )
        return
    with bench_server() as pg:
        database = pg.database("lifecycle")
        key = asyncio.run(_key(database.app_url))
        every_row = pg.superuser_dsn.replace("/memory_mcp?", f"/{database.name}?")
        with _serve(database.owner_url) as a, _serve(database.owner_url) as b:
            bases = [a, b]
            if args.saves:
                elapsed = asyncio.run(retried_saves(bases, key, "retries", args.saves, keyed=True))
                rows = _rows(every_row, "retries")
                print(
                    f"with idempotencyKey: {args.saves} saves, each retried once on the other server, "
                    f"{CLIENTS} clients, 2 servers: {rows} memories stored, {rows - args.saves} duplicates "
                    f"({elapsed:.0f} s, {2 * args.saves / elapsed:.1f} requests/s)"
                )
            if args.control:
                elapsed = asyncio.run(retried_saves(bases, key, "control", args.control, keyed=False))
                rows = _rows(every_row, "control")
                print(
                    f"without a key: {args.control} saves retried the same way: {rows} memories stored, "
                    f"{rows - args.control} duplicates ({elapsed:.0f} s)"
                )
            plain, keyed = asyncio.run(latency(bases[0], key, args.latency))
            print(
                f"save p50 over REST, one client, {args.latency} of each alternating: plain "
                f"{statistics.median(plain):.1f} ms (p99 {percentile(plain, 99):.1f}), with idempotencyKey "
                f"{statistics.median(keyed):.1f} ms (p99 {percentile(keyed, 99):.1f})"
            )


if __name__ == "__main__":
    main()
