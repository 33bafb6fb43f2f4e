"""Crash harness: concurrent writers against `memory-mcp serve` while the server or PostgreSQL is killed.

Starts `serve` in its own process (embedded PostgreSQL in a temporary data dir), runs N writers in a
closed loop (REST ``POST /v1/memories``, unique content each), beside them uploaders (small unique
text files to ``POST /v1/documents``) and importers (JSON-lines files of unique memories to
``POST /v1/spaces/default/import?from=jsonl``, with a key that has the Curate grant) and an OAuth
app that runs grants through (authorize, token, refresh, revoke), and in each round kills with
SIGKILL
either the server process (then starts it again on the same data dir and port, as systemd or a
kubelet would) or the PostgreSQL postmaster (then leaves recovery to the server's supervisor).

Per round it prints the recovery time: from the kill until the first write that was sent after the
kill is acknowledged. At the end every acknowledged write is looked up in the database by its id:
an acknowledged write that is missing is lost (the target is 0). Every acknowledged upload (202 or
200 with an id) must be a document that finishes: the harness waits (``--finish-s``) until each is
done or failed (after a restart the workers resume the queue; a job whose worker died waits out its
lease, ``--lease-s``, set on the server), then counts the lost, failed and unfinished ones. No
document from a file may be stored by half: done without a memory (or with its file or job left
over), or queued without its file or its job. Every line of an acknowledged import (a 200 that took
all lines) must be a live memory, and every grant whose revocation was answered 200 must refuse its
access token (the first 15, under the failed-authentication budget). It also counts the answers while the service was down (503,
refused connections) and any other status, which should not occur, and checks that after the final
clean stop no PostgreSQL is left running on the data dir.

    python -m bench.crash [--writers 8] [--uploaders 2] [--importers 1] [--rounds 3]
                          [--kinds serve,postgres] [--load-s 3]
    python -m bench.crash --writers 4 --rounds 1          # the quick run
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
from typing import IO, Any

import httpx2
import psutil
import psycopg

from bench import paths
from bench.common import free_port
from bench.load import THINGS, TOPICS, VERBS, wait_ready
from memory_mcp.store.embedded import EmbeddedPostgres
from tests.server.oauth_flow import Flow

RECOVERY_LIMIT_S = 180.0
UPLOAD_PAUSE_S = 0.2  # uploads and imports are rarer than saves: a pause after each
OK_STATUSES = ("200", "202", "503", "no answer")
AUTH_CHECKS = 15  # revoked grants checked at the end: under the server's failed-authentication budget


@dataclass
class Ack:
    memory_id: str
    sent: float  # monotonic times: the request went out, the answer came back
    acked: float


@dataclass
class Tally:
    acks: list[Ack] = field(default_factory=list)
    answers: Counter[str] = field(default_factory=Counter)  # "upload ..." and "import ..." for those
    uploads: dict[str, str] = field(default_factory=dict)  # acknowledged document id -> its text
    imported: list[str] = field(default_factory=list)  # every line of every acknowledged import
    revoked: list[str] = field(default_factory=list)  # access tokens of grants revoked with a 200


class Server:
    """`memory-mcp serve` on a fixed data dir and port, its output in files under the data dir."""

    def __init__(self, data_dir: Path, port: int, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = port
        self.env = env or {}
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
            env={**os.environ, "MEMORY_MCP_LOG_LEVEL": "warning", **self.env},
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


async def post(
    http: httpx2.AsyncClient, tally: Tally, what: str, url: str, **request: Any
) -> tuple[int, dict[str, Any]] | None:
    """POST, and the status with the JSON body ({} when it is not JSON); None (counted as ``what``
    with no answer, after a pause) while the service is down."""
    try:
        answer = await http.post(url, **request)
    except httpx2.HTTPError:
        tally.answers[f"{what} no answer".strip()] += 1
        await asyncio.sleep(0.1)
        return None
    body = answer.json() if answer.headers.get("content-type") == "application/json" else {}
    return answer.status_code, body


async def writer(index: int, base: str, key: str, tally: Tally, stop: asyncio.Event) -> None:
    rng = random.Random(index)
    seq = 0
    async with httpx2.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        while not stop.is_set():
            seq += 1
            sent = time.monotonic()
            got = await post(http, tally, "", "/v1/memories", json={"content": note(index, seq, rng)})
            if got is None:
                continue
            status, body = got
            if status == 200 and body.get("memory"):
                tally.answers[f"200 {body['status']}"] += 1
                tally.acks.append(Ack(body["memory"]["id"], sent, time.monotonic()))
            else:
                tally.answers[f"{status} {body.get('error', '')}".strip()] += 1
                await asyncio.sleep(0.1)


async def uploader(index: int, base: str, key: str, tally: Tally, stop: asyncio.Event) -> None:
    """Small text files to POST /v1/documents, each unique; a 200/202 with an id is acknowledged."""
    rng = random.Random(1000 + index)
    seq = 0
    async with httpx2.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        while not stop.is_set():
            seq += 1
            content = f"Crash bench upload {index}.{seq}. {note(index, seq, rng)}\n"
            got = await post(
                http,
                tally,
                "upload",
                "/v1/documents",
                files={"file": (f"note-{index}-{seq}.txt", content.encode(), "text/plain")},
            )
            if got is None:
                continue
            status, body = got
            tally.answers[f"upload {status} {body.get('error', '')}".strip()] += 1
            if status in (200, 202) and body.get("id"):
                tally.uploads[body["id"]] = content
            await asyncio.sleep(UPLOAD_PAUSE_S)


async def importer(index: int, base: str, key: str, lines: int, tally: Tally, stop: asyncio.Event) -> None:
    """JSON-lines files of ``lines`` unique memories to POST /v1/spaces/default/import; a 200 that
    took every line (imported, or already there from a try whose answer was lost) acknowledges them."""
    rng = random.Random(2000 + index)
    seq = 0
    async with httpx2.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60
    ) as http:
        while not stop.is_set():
            seq += 1
            contents = [
                f"Crash bench import {index}.{seq}.{n}: {note(index, seq, rng)}" for n in range(lines)
            ]
            file = paths.jsonl_file(contents, f"crash-{index}-{seq}")
            got = await post(
                http,
                tally,
                "import",
                "/v1/spaces/default/import",
                params={"from": "jsonl"},
                files={"file": ("export.jsonl", file, "application/x-ndjson")},
            )
            if got is None:
                continue
            status, body = got
            if status == 200 and body.get("imported", 0) + body.get("already", 0) == lines:
                tally.answers["import 200"] += 1
                tally.imported.extend(contents)
            elif status == 200:
                tally.answers[f"import 200 but {len(body.get('skipped', []))} skipped"] += 1
            else:
                tally.answers[f"import {status} {body.get('error', '')}".strip()] += 1
            await asyncio.sleep(UPLOAD_PAUSE_S)


async def recovered_after(tally: Tally, killed_at: float) -> float:
    """Seconds from the kill until a write sent after it is acknowledged."""
    deadline = killed_at + RECOVERY_LIMIT_S
    while time.monotonic() < deadline:
        after = [a.acked for a in tally.acks if a.sent > killed_at]
        if after:
            return min(after) - killed_at
        await asyncio.sleep(0.05)
    raise RuntimeError(f"no acknowledged write within {RECOVERY_LIMIT_S:.0f} s of the kill")


@dataclass
class Findings:
    lost: list[str] = field(default_factory=list)  # acknowledged memories that are not there
    uploads_lost: list[str] = field(default_factory=list)  # acknowledged documents that are not there
    uploads_status: Counter[str] = field(default_factory=Counter)  # acknowledged documents by status
    uploads_failed: list[str] = field(default_factory=list)  # "id: error" of those that failed
    # Documents from files stored by half: done without a memory (or with its file or job left), or
    # waiting without their file or their job.
    half_stored: list[str] = field(default_factory=list)
    imports_lost: list[str] = field(default_factory=list)  # acknowledged import lines not there


HALF_STORED = """
SELECT * FROM (
    SELECT d.id, d.status,
        (SELECT count(*) FROM memories m WHERE m.document_id = d.id) AS memories,
        (SELECT count(*) FROM document_files f WHERE f.document_id = d.id) AS pieces,
        (SELECT count(*) FROM document_jobs j WHERE j.document_id = d.id) AS jobs
    FROM documents d WHERE d.source = 'file' AND d.forgotten_at IS NULL
) x
WHERE (status = 'done' AND (memories = 0 OR pieces > 0 OR jobs > 0))
   OR (status IN ('queued', 'processing') AND (pieces = 0 OR jobs = 0))
"""


def check_database(data_dir: Path, tally: Tally) -> Findings:
    """Everything acknowledged, looked up in the database (joins the running PostgreSQL)."""
    found = Findings()
    pg = EmbeddedPostgres(data_dir)
    pg.start()
    try:
        with psycopg.connect(pg.superuser_url.replace("+psycopg", "")) as conn:
            ids = [a.memory_id for a in tally.acks]
            there = {
                str(row[0])
                for row in conn.execute("SELECT id FROM memories WHERE id = ANY(%s::uuid[])", (ids,))
            }
            found.lost = [i for i in ids if i not in there]
            documents = {
                str(row[0]): (str(row[1]), row[2])
                for row in conn.execute(
                    "SELECT id, status, error FROM documents WHERE id = ANY(%s::uuid[])",
                    (list(tally.uploads),),
                )
            }
            found.uploads_lost = [i for i in tally.uploads if i not in documents]
            for doc_id, (status, error) in documents.items():
                found.uploads_status[status] += 1
                if status == "failed":
                    found.uploads_failed.append(f"{doc_id}: {error}")
            found.half_stored = [
                f"{row[0]} ({row[1]}, {row[2]} memories, {row[3]} file pieces, {row[4]} jobs)"
                for row in conn.execute(HALF_STORED)
            ]
            present = {
                row[0]
                for row in conn.execute(
                    "SELECT content FROM memories WHERE content = ANY(%s) AND forgotten_at IS NULL",
                    (tally.imported,),
                )
            }
            found.imports_lost = [c for c in tally.imported if c not in present]
        return found
    finally:
        pg.stop()


async def wait_documents(base: str, key: str, ids: list[str], limit_s: float) -> tuple[int, float]:
    """Wait until every document in ``ids`` is done or failed (after a restart the workers resume
    the queue; a job whose worker died waits out its lease): how many are still not, and the
    seconds waited."""
    started = time.monotonic()
    waiting = set(ids)
    async with httpx2.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        while waiting and time.monotonic() - started < limit_s:
            for doc_id in sorted(waiting):
                try:
                    answer = await http.get(f"/v1/documents/{doc_id}")
                except httpx2.HTTPError:
                    break
                if answer.status_code == 200 and answer.json().get("status") in ("done", "failed"):
                    waiting.discard(doc_id)
            if waiting:
                await asyncio.sleep(1.0)
    return len(waiting), time.monotonic() - started


def _status_of(answer: str) -> str:
    for prefix in ("upload ", "import ", "oauth revoke ", "oauth refresh ", "oauth "):
        answer = answer.removeprefix(prefix)
    return answer


def unexpected_answers(answers: Counter[str]) -> dict[str, int]:
    """Answers other than a success, 503 or no connection, whichever writer got them."""
    return {k: v for k, v in answers.items() if not _status_of(k).startswith(OK_STATUSES) or "skipped" in k}


async def oauth_app(base: str, key: str, tally: Tally, stop: asyncio.Event) -> None:
    """An OAuth app running grants through in a loop: authorize (sign-in and consent), token,
    refresh, revoke. A revocation answered 200 is acknowledged: its grant's access token must be
    refused at the end, whatever was killed in between."""
    async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
        app = Flow(http)
        while not stop.is_set():
            try:
                if not app.client_id:
                    await app.register(client_name="Crash bench app")
                tokens = await app.tokens(key)
                refreshed = await app.refresh(tokens["refresh_token"])
                if refreshed.status_code != 200:
                    tally.answers[f"oauth refresh {refreshed.status_code}"] += 1
                    continue
                revoked = await http.post("/revoke", data={"token": refreshed.json()["refresh_token"]})
                tally.answers[f"oauth revoke {revoked.status_code}"] += 1
                if revoked.status_code == 200:
                    tally.revoked.append(refreshed.json()["access_token"])
            except (AssertionError, KeyError, ValueError, httpx2.HTTPError):
                tally.answers["oauth no answer"] += 1  # a step met the service down (503, no connection)
                await asyncio.sleep(UPLOAD_PAUSE_S)


async def still_accepted(base: str, tokens: list[str]) -> int:
    """How many of the access tokens of revoked grants the server still takes."""
    async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
        answers = [await http.get("/v1/whoami", headers={"Authorization": f"Bearer {t}"}) for t in tokens]
    return sum(a.status_code != 401 for a in answers)


async def run(
    writers: int,
    uploaders: int,
    importers: int,
    lines: int,
    rounds: int,
    kinds: list[str],
    load_s: float,
    lease_s: float,
    finish_s: float,
) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="memory-mcp-crash-"))
    server = Server(data_dir, free_port(), {"MEMORY_MCP_DOCUMENT_LEASE_S": str(lease_s)})
    server.start()
    await wait_ready(server.base)
    key = (data_dir / "bootstrap-key").read_text().strip()
    curator = paths.curate_key(data_dir) if importers else ""
    tally, stop = Tally(), asyncio.Event()
    tasks = [asyncio.create_task(writer(i, server.base, key, tally, stop)) for i in range(writers)]
    tasks += [asyncio.create_task(uploader(i, server.base, key, tally, stop)) for i in range(uploaders)]
    tasks += [
        asyncio.create_task(importer(i, server.base, curator, lines, tally, stop)) for i in range(importers)
    ]
    tasks += [asyncio.create_task(oauth_app(server.base, key, tally, stop))]
    print(
        f"{writers} writers, {uploaders} uploaders, {importers} importers ({lines} lines a file), "
        f"{rounds} rounds per kind; document lease {lease_s:.0f} s; data dir {data_dir}"
    )
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
    unfinished, waited = await wait_documents(server.base, key, list(tally.uploads), finish_s)
    # Every failed token counts against the throttle of this address: a 429 would hide a 200.
    accepted = await still_accepted(server.base, tally.revoked[:AUTH_CHECKS])
    found = check_database(data_dir, tally)
    code = server.stop()
    left = postgres_left(data_dir)
    unexpected = unexpected_answers(tally.answers)
    print(f"acknowledged writes: {len(tally.acks)}; lost: {len(found.lost)}")
    print(
        f"acknowledged uploads: {len(tally.uploads)}; lost: {len(found.uploads_lost)}; by status after "
        f"{waited:.0f} s of waiting: {dict(sorted(found.uploads_status.items()))}; not finished: {unfinished}"
    )
    for line in found.uploads_failed[:5]:
        print(f"  failed: {line}")
    print(
        f"documents stored by half (done without memories, or waiting without file or job): {len(found.half_stored)}"
    )
    for line in found.half_stored[:5]:
        print(f"  {line}")
    print(f"acknowledged import lines: {len(tally.imported)}; lost: {len(found.imports_lost)}")
    for line in found.imports_lost[:5]:
        print(f"  lost: {line}")
    print(
        f"OAuth grants revoked (authorize, token, refresh, revoke answered 200): {len(tally.revoked)}; "
        f"of the first {min(len(tally.revoked), AUTH_CHECKS)}, still accepted: {accepted}"
    )
    print(f"all answers: {dict(sorted(tally.answers.items()))}")
    print(f"answers other than 200/202/503/no connection: {unexpected or 'none'}")
    print(f"serve exit code after SIGTERM: {code}; PostgreSQL processes left: {len(left)}")
    failures = (
        found.lost
        or found.uploads_lost
        or found.half_stored
        or found.imports_lost
        or unfinished
        or found.uploads_failed
        or accepted
    )
    if not failures and not left and not unexpected:
        shutil.rmtree(data_dir, ignore_errors=True)
    else:
        print(f"kept {data_dir} (serve logs: serve-*.log)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--writers", type=int, default=8, help="closed-loop POST /v1/memories writers")
    parser.add_argument("--uploaders", type=int, default=2, help="writers uploading small text files")
    parser.add_argument("--importers", type=int, default=1, help="writers posting to the import route")
    parser.add_argument("--lines", type=int, default=5, help="memories per imported file")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per kind of crash")
    parser.add_argument("--kinds", default="serve,postgres", help="serve, postgres or both")
    parser.add_argument("--load-s", type=float, default=3.0, help="seconds of load before each kill")
    parser.add_argument(
        "--lease-s",
        type=float,
        default=10.0,
        help="document_lease_s of the server: how long a job whose worker died waits (default 10)",
    )
    parser.add_argument(
        "--finish-s", type=float, default=180.0, help="how long to wait for the uploads to be extracted"
    )
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    if not set(kinds) <= {"serve", "postgres"}:
        parser.error("--kinds takes serve and/or postgres")
    if args.writers < 1:
        parser.error("--writers: at least 1 (the recovery time is that of a memory write)")
    asyncio.run(
        run(
            args.writers,
            args.uploaders,
            args.importers,
            args.lines,
            args.rounds,
            kinds,
            args.load_s,
            args.lease_s,
            args.finish_s,
        )
    )


if __name__ == "__main__":
    main()
