"""Crash harness: concurrent writers against `memory-mcp serve` while the server or PostgreSQL is killed.

Starts `serve` in its own process (embedded PostgreSQL in a temporary data dir), runs N writers in a
closed loop (REST ``POST /v1/memories``, unique content each), and in each round kills with SIGKILL
either the server process (then starts it again on the same data dir and port, as systemd or a
kubelet would) or the PostgreSQL postmaster (then leaves recovery to the server's supervisor).

Per round it prints the recovery time: from the kill until the first write that was sent after the
kill is acknowledged. At the end every acknowledged write is looked up in the database by its id:
an acknowledged write that is missing is lost (the target is 0). It also counts the answers while
the service was down (503, refused connections) and any other status, which should not occur, and
checks that after the final clean stop no PostgreSQL is left running on the data dir.

    python -m bench.crash [--writers 8] [--rounds 3] [--kinds serve,postgres] [--load-s 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx2
import psutil
import psycopg

from bench.load import THINGS, TOPICS, VERBS, free_port, wait_ready
from memory_mcp.store.embedded import EmbeddedPostgres

RECOVERY_LIMIT_S = 180.0


@dataclass
class Ack:
    memory_id: str
    sent: float  # monotonic times: the request went out, the answer came back
    acked: float


@dataclass
class Tally:
    acks: list[Ack] = field(default_factory=list)
    answers: Counter[str] = field(default_factory=Counter)


class Server:
    """`memory-mcp serve` on a fixed data dir and port, its output in files under the data dir."""

    def __init__(self, data_dir: Path, port: int) -> None:
        self.data_dir = data_dir
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        self.starts += 1
        self._log = (self.data_dir / f"serve-{self.starts}.log").open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memory_mcp.cli",
                "serve",
                "--data-dir",
                str(self.data_dir),
                "--port",
                str(self.port),
            ],
            stdout=self._log,
            stderr=self._log,
            env={**os.environ, "MEMORY_MCP_LOG_LEVEL": "warning"},
        )

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=120)

    def postmaster_pid(self) -> int:
        return int((self.data_dir / "pg" / "postmaster.pid").read_text().split("\n", 1)[0])


def postgres_left(data_dir: Path) -> list[int]:
    """Pids of PostgreSQL processes still running on ``data_dir``."""
    pgdata = str(data_dir / "pg")
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "postgres" and pgdata in " ".join(proc.info["cmdline"] or []):
            found.append(proc.pid)
    return found


def note(writer: int, seq: int, rng: random.Random) -> str:
    return (
        f"Crash bench note {writer}.{seq}: the {rng.choice(TOPICS)} team {rng.choice(VERBS)} "
        f"{rng.choice(THINGS)} since sprint {rng.randint(1, 10_000)}."
    )


async def writer(index: int, base: str, key: str, tally: Tally, stop: asyncio.Event) -> None:
    rng = random.Random(index)
    seq = 0
    async with httpx2.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        while not stop.is_set():
            seq += 1
            sent = time.monotonic()
            try:
                answer = await http.post("/v1/memories", json={"content": note(index, seq, rng)})
            except httpx2.HTTPError:
                tally.answers["no answer"] += 1
                await asyncio.sleep(0.1)
                continue
            body = answer.json() if answer.headers.get("content-type") == "application/json" else {}
            if answer.status_code == 200 and body.get("memory"):
                tally.answers[f"200 {body['status']}"] += 1
                tally.acks.append(Ack(body["memory"]["id"], sent, time.monotonic()))
            else:
                tally.answers[f"{answer.status_code} {body.get('error', '')}".strip()] += 1
                await asyncio.sleep(0.1)


async def recovered_after(tally: Tally, killed_at: float) -> float:
    """Seconds from the kill until a write sent after it is acknowledged."""
    deadline = killed_at + RECOVERY_LIMIT_S
    while time.monotonic() < deadline:
        after = [a.acked for a in tally.acks if a.sent > killed_at]
        if after:
            return min(after) - killed_at
        await asyncio.sleep(0.05)
    raise RuntimeError(f"no acknowledged write within {RECOVERY_LIMIT_S:.0f} s of the kill")


def lost_writes(data_dir: Path, acks: list[Ack]) -> list[str]:
    """Acknowledged memory ids that are not in the database (joins the running PostgreSQL)."""
    pg = EmbeddedPostgres(data_dir)
    pg.start()
    try:
        with psycopg.connect(pg.superuser_url.replace("+psycopg", "")) as conn:
            ids = [a.memory_id for a in acks]
            found = {
                str(row[0])
                for row in conn.execute("SELECT id FROM memories WHERE id = ANY(%s::uuid[])", (ids,))
            }
        return [i for i in ids if i not in found]
    finally:
        pg.stop()


async def run(writers: int, rounds: int, kinds: list[str], load_s: float) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="memory-mcp-crash-"))
    server = Server(data_dir, free_port())
    server.start()
    await wait_ready(server.base)
    key = (data_dir / "bootstrap-key").read_text().strip()
    tally, stop = Tally(), asyncio.Event()
    tasks = [asyncio.create_task(writer(i, server.base, key, tally, stop)) for i in range(writers)]
    print(f"{writers} writers, {rounds} rounds per kind; data dir {data_dir}")
    print(f"{'round':<12}{'recovery s':>11}{'acks so far':>13}  answers during the round")
    try:
        for kind in kinds:
            for number in range(1, rounds + 1):
                await asyncio.sleep(load_s)
                before = Counter(tally.answers)
                killed_at = time.monotonic()
                if kind == "serve":
                    server.kill()
                    server.start()
                else:
                    old = server.postmaster_pid()
                    os.kill(old, signal.SIGKILL)
                recovery = await recovered_after(tally, killed_at)
                if kind == "postgres":
                    assert server.postmaster_pid() != old, "PostgreSQL was not restarted"
                during = tally.answers - before
                shown = ", ".join(f"{k}: {v}" for k, v in sorted(during.items()))
                print(f"{kind + ' ' + str(number):<12}{recovery:>11.2f}{len(tally.acks):>13}  {shown}")
        await asyncio.sleep(load_s)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    lost = lost_writes(data_dir, tally.acks)
    code = server.stop()
    left = postgres_left(data_dir)
    unexpected = {k: v for k, v in tally.answers.items() if not k.startswith(("200", "503", "no answer"))}
    print(f"acknowledged writes: {len(tally.acks)}; lost: {len(lost)}")
    print(f"all answers: {dict(sorted(tally.answers.items()))}")
    print(f"answers other than 200/503/no connection: {unexpected or 'none'}")
    print(f"serve exit code after SIGTERM: {code}; PostgreSQL processes left: {len(left)}")
    if not lost and not left and not unexpected:
        shutil.rmtree(data_dir, ignore_errors=True)
    else:
        print(f"kept {data_dir} (serve logs: serve-*.log)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per kind of crash")
    parser.add_argument("--kinds", default="serve,postgres", help="serve, postgres or both")
    parser.add_argument("--load-s", type=float, default=3.0, help="seconds of load before each kill")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    if not set(kinds) <= {"serve", "postgres"}:
        parser.error("--kinds takes serve and/or postgres")
    asyncio.run(run(args.writers, args.rounds, kinds, args.load_s))


if __name__ == "__main__":
    main()
