"""Soak harness: mixed load against one `memory-mcp serve` for a fixed time, watching for drift.

Starts `serve` in its own process (embedded PostgreSQL in a temporary data dir, the in-process
embedder) and runs C clients in a closed loop over REST for ``--duration`` seconds (default 600),
each call drawn at random: save 27%, search 44%, list memories 14%, listDocuments (GET
/v1/documents) 10%, upload a small text file 3%, import a JSONL export of three memories (POST
/v1/spaces/default/import, with a key that has the Curate grant) 2%. Client 0 is an OAuth app: it
registers once, gets a token by the authorization code flow with PKCE, calls with the access token
and refreshes it every 20 s (timed as the operation ``refresh``), and every 60 s runs a whole grant
through (authorize, token, refresh, revoke, then the revoked token refused: ``oauth_cycle``); the
others use the key. Every 10 s it samples the memory of the
server process (RSS) and of PostgreSQL (the sum of PSS over the postmaster and its backends, so
shared buffers count once). At the end it prints:

- memory growth of both from the first sample after warm-up (the end of the first minute) to the
  last, with the peak;
- the error rate (anything but a 200, or no answer) per operation;
- p50 and p99 per operation in the first minute against the last minute: a p99 that drifts up
  points at a leak, bloat or a queue that does not drain.

Traffic goes to 127.0.0.1 only.

    python -m bench.soak [--duration 600] [--clients 4]
    python -m bench.soak --duration 60          # the quick run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import psutil

from bench import paths
from bench.common import free_port
from bench.crash import Server, note, postgres_left
from bench.load import QUERIES, percentile, wait_ready
from tests.server.oauth_flow import Flow

SAMPLE_EVERY_S = 10.0
WINDOW_S = 60.0  # the "first minute" and "last minute" of the p99 drift
MIX = (
    ("save", 0.27),
    ("search", 0.44),
    ("list", 0.14),
    ("documents", 0.1),
    ("upload", 0.03),
    ("import", 0.02),
)
REFRESH_EVERY_S = 20.0  # the OAuth client refreshes its access token this often
CYCLE_EVERY_S = 60.0  # and runs a whole grant, from authorization to revocation, this often
OPS = (*(op for op, _ in MIX), "refresh", "oauth_cycle")


@dataclass
class Record:
    calls: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    memory: list[tuple[float, int, int]] = field(default_factory=list)  # (t, server RSS, PG PSS)


def server_rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def postgres_pss(postmaster_pid: int) -> int:
    """Proportional set size of the postmaster and all its children (shared memory counted once)."""
    root = psutil.Process(postmaster_pid)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += int(proc.memory_full_info().pss)
        except psutil.Error:  # a backend that exited meanwhile
            continue
    return total


class Bearer(httpx2.Auth):
    """The client's credential, which the OAuth client swaps for a fresh access token."""

    def __init__(self, token: str) -> None:
        self.token = token

    def auth_flow(self, request: httpx2.Request) -> Any:
        request.headers["Authorization"] = f"Bearer {self.token}"
        yield request


def export_of(index: int, seq: int, rng: random.Random) -> bytes:
    """A JSONL export of three memories, new ones each time (an import of them adds three)."""
    lines = [
        json.dumps({"type": "memory", "id": f"s{index}-{seq}-{n}", "content": note(index, seq * 10 + n, rng)})
        for n in range(3)
    ]
    return ("\n".join(lines) + "\n").encode()


async def oauth_cycle(app: Flow, http: httpx2.AsyncClient, key: str) -> bool:
    """A whole grant: a code, its tokens, a refresh, the revocation; True when every step answered as
    it should and the revoked access token is then refused."""
    tokens = await app.tokens(key)
    refreshed = await app.refresh(tokens["refresh_token"])
    if refreshed.status_code != 200:
        return False
    access = refreshed.json()["access_token"]
    revoked = await http.post("/revoke", data={"token": refreshed.json()["refresh_token"]})
    after = await http.get("/v1/whoami", headers={"Authorization": f"Bearer {access}"})
    return revoked.status_code == 200 and after.status_code == 401


async def client(
    index: int,
    base: str,
    key: str,
    record: Record,
    started: float,
    until: float,
    oauth: bool = False,
    curator: str = "",
) -> None:
    """One client in a closed loop. With ``oauth`` it signs in as an app once (registration, the
    authorization code with PKCE), calls with the access token, and refreshes it every
    REFRESH_EVERY_S (the refresh is timed as an operation of its own)."""
    rng = random.Random(index)
    ops, weights = [op for op, _ in MIX], [weight for _, weight in MIX]
    seq = 0
    bearer = Bearer(key)
    async with (
        httpx2.AsyncClient(base_url=base, timeout=60) as plain,
        httpx2.AsyncClient(base_url=base, auth=bearer, timeout=60) as http,
    ):
        app = Flow(plain)
        refresh_token, refresh_at, cycle_at = "", until, until
        if oauth:
            try:
                await app.register(client_name="Soak app")
                tokens = await app.tokens(key)
            except (AssertionError, httpx2.HTTPError) as exc:  # a step that did not answer as it should
                print(f"OAuth sign-in failed, client {index} uses the key instead: {exc}")
                record.errors["refresh"] += 1
            else:
                bearer.token, refresh_token = tokens["access_token"], tokens["refresh_token"]
                refresh_at = time.monotonic() + REFRESH_EVERY_S
                cycle_at = time.monotonic() + CYCLE_EVERY_S
        while time.monotonic() < until:
            now = time.monotonic()
            op = (
                "refresh"
                if now >= refresh_at
                else "oauth_cycle"
                if now >= cycle_at
                else rng.choices(ops, weights)[0]
            )
            sent = time.monotonic()
            try:
                if op == "oauth_cycle":
                    cycle_at = time.monotonic() + CYCLE_EVERY_S
                    if await oauth_cycle(app, plain, key):
                        record.calls[op].append((sent - started, time.monotonic() - sent))
                    else:
                        record.errors[op] += 1
                    continue
                if op == "import":
                    seq += 1
                    answer = await plain.post(
                        "/v1/spaces/default/import",
                        files={"file": ("export.jsonl", export_of(index, seq, rng))},
                        headers={"Authorization": f"Bearer {curator}"},
                    )
                elif op == "refresh":
                    answer = await app.refresh(refresh_token)
                    if answer.status_code == 200:
                        bearer.token = answer.json()["access_token"]
                        refresh_token = answer.json()["refresh_token"]
                    refresh_at = time.monotonic() + REFRESH_EVERY_S
                elif op == "save":
                    seq += 1
                    answer = await http.post("/v1/memories", json={"content": note(index, seq, rng)})
                elif op == "search":
                    answer = await http.get("/v1/search", params={"query": rng.choice(QUERIES)})
                elif op == "documents":
                    answer = await http.get("/v1/documents", params={"page": rng.randint(1, 3)})
                elif op == "upload":
                    seq += 1
                    text = f"Soak upload {index}.{seq}. {note(index, seq, rng)}\n"
                    answer = await http.post(
                        "/v1/documents",
                        files={"file": (f"soak-{index}-{seq}.txt", text.encode(), "text/plain")},
                    )
                else:
                    answer = await http.get("/v1/memories", params={"page": rng.randint(1, 5)})
                ok = answer.status_code in ((200, 202) if op == "upload" else (200,))
            except httpx2.HTTPError:
                ok = False
            if ok:
                record.calls[op].append((sent - started, time.monotonic() - sent))
            else:
                record.errors[op] += 1


async def sample_memory(server: Server, record: Record, started: float, until: float) -> None:
    assert server.proc is not None
    while time.monotonic() < until:
        record.memory.append(
            (
                time.monotonic() - started,
                server_rss(server.proc.pid),
                postgres_pss(server.postmaster_pid()),
            )
        )
        await asyncio.sleep(SAMPLE_EVERY_S)


def report(record: Record, duration: float, clients: int) -> None:
    mib = 1024 * 1024
    warm = [m for m in record.memory if m[0] >= WINDOW_S] or record.memory
    first, last = warm[0], record.memory[-1]
    print(f"{duration:.0f} s, {clients} clients; memory sampled every {SAMPLE_EVERY_S:.0f} s")
    for label, col in (("server RSS", 1), ("PostgreSQL PSS", 2)):
        peak = max(m[col] for m in record.memory)
        print(
            f"{label:<16} at {first[0]:>4.0f} s {first[col] / mib:>7.1f} MiB -> at {last[0]:>4.0f} s "
            f"{last[col] / mib:>7.1f} MiB ({(last[col] - first[col]) / mib:+.1f} MiB), peak {peak / mib:.1f} MiB"
        )
    window = min(WINDOW_S, duration / 3)
    print(
        f"{'op':<10}{'calls':>6}{'errors':>8}{'error %':>9}{'calls/s':>9}"
        f"{'p50 first':>11}{'p50 last':>10}{'p99 first':>11}{'p99 last':>10}  (ms; first and last {window:.0f} s)"
    )
    for op in OPS:
        calls = record.calls.get(op, [])
        errors = record.errors.get(op, 0)
        head = [lat * 1e3 for t, lat in calls if t < window]
        tail = [lat * 1e3 for t, lat in calls if t >= duration - window]
        total = len(calls) + errors

        def cell(values: list[float], q: float) -> str:
            return f"{percentile(values, q):.1f}" if values else "-"

        print(
            f"{op:<10}{len(calls):>6}{errors:>8}{100 * errors / max(total, 1):>9.2f}{len(calls) / duration:>9.1f}"
            f"{cell(head, 0.5):>11}{cell(tail, 0.5):>10}{cell(head, 0.99):>11}{cell(tail, 0.99):>10}"
        )


async def run(duration: float, clients: int) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="memory-mcp-soak-"))
    server = Server(data_dir, free_port())
    server.start()
    try:
        await wait_ready(server.base)
        key = (data_dir / "bootstrap-key").read_text().strip()
        curator = paths.curate_key(data_dir)
        record = Record()
        started = time.monotonic()
        until = started + duration
        await asyncio.gather(
            sample_memory(server, record, started, until),
            # Client 0 is an OAuth app: its calls carry an access token it refreshes.
            *(
                client(i, server.base, key, record, started, until, oauth=i == 0, curator=curator)
                for i in range(clients)
            ),
        )
        report(record, time.monotonic() - started, clients)
    finally:
        server.stop()
    left = postgres_left(data_dir)
    print(f"PostgreSQL processes left after the clean stop: {len(left)}")
    shutil.rmtree(data_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of load (default 600)")
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    if args.duration < 30:
        parser.error("--duration: at least 30 s")
    asyncio.run(run(args.duration, args.clients))


if __name__ == "__main__":
    main()
