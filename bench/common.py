"""What the store benchmarks share: a throw-away embedded PostgreSQL, fresh databases, a writer.

Every benchmark runs against its own PostgreSQL in a temporary folder (removed afterwards), so
nothing it does touches a user's data dir, and two benchmarks never share a server.
"""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import Embedder, LocalEmbedder, make_embedder
from memory_mcp.store import apikeys, identity, spaces, users
from memory_mcp.store.access import Access, Role
from memory_mcp.store.apikeys import GrantSpec
from memory_mcp.store.db import Database
from memory_mcp.store.embedded import APP_ROLE, OWNER_ROLE, EmbeddedPostgres
from memory_mcp.store.migrate import run_migrations
from memory_mcp.store.models import SpaceContext

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@dataclass(frozen=True)
class BenchDatabase:
    """One migrated database: the server's least-privilege URL and the schema owner's URL."""

    name: str
    app_url: str
    owner_url: str

    @property
    def owner_dsn(self) -> str:
        """The owner URL in the form psycopg takes directly (bulk loads, index builds)."""
        return self.owner_url.replace("+psycopg", "")


class BenchServer:
    """An embedded PostgreSQL under a temporary folder; ``database()`` hands out fresh databases."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pg = EmbeddedPostgres(root)
        self._count = 0

    def start(self, settings: dict[str, str] | None = None) -> None:
        """Start; server-level ``settings`` (e.g. shared_buffers) are written and applied by a restart."""
        self.pg.start()
        if settings:
            with psycopg.connect(self.superuser_dsn, autocommit=True) as conn:
                for name, value in settings.items():
                    conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            self.pg.stop()
            self.pg = EmbeddedPostgres(self.root)
            self.pg.start()

    def stop(self) -> None:
        self.pg.stop()

    @property
    def superuser_dsn(self) -> str:
        url: str = self.pg.superuser_url
        return url.replace("+psycopg", "")

    def database(self, label: str = "bench") -> BenchDatabase:
        """A new database with the extensions and the schema at head, owned like a real deployment."""
        self._count += 1
        name = f"{label}_{self._count}"
        with psycopg.connect(self.superuser_dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} OWNER {OWNER_ROLE}")
            conn.execute(f"GRANT CONNECT ON DATABASE {name} TO {APP_ROLE}")
        with psycopg.connect(
            self.superuser_dsn.replace("/memory_mcp?", f"/{name}?"), autocommit=True
        ) as conn:
            conn.execute("CREATE EXTENSION vector")
            conn.execute("CREATE EXTENSION pg_trgm")
        owner_url = self.pg.owner_url.replace("/memory_mcp?", f"/{name}?")
        run_migrations(owner_url, 384, APP_ROLE)
        return BenchDatabase(name, self.pg.app_url.replace("/memory_mcp?", f"/{name}?"), owner_url)

    def mark_leakproof(self, database: BenchDatabase, functions: Sequence[str]) -> None:
        """Mark functions LEAKPROOF in one database (superuser only; see bench/scale.py)."""
        with psycopg.connect(
            self.superuser_dsn.replace("/memory_mcp?", f"/{database.name}?"), autocommit=True
        ) as conn:
            for function in functions:
                conn.execute(f"ALTER FUNCTION {function} LEAKPROOF")

    def drop(self, database: BenchDatabase) -> None:
        """Remove a database (the big scale points would otherwise fill the disk)."""
        with psycopg.connect(self.superuser_dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {database.name} WITH (FORCE)")


@contextmanager
def bench_server(settings: dict[str, str] | None = None) -> Iterator[BenchServer]:
    root = Path(tempfile.mkdtemp(prefix="memory-mcp-bench-"))
    server = BenchServer(root)
    try:
        server.start(settings)
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


async def writer_contexts(db: Database, space_keys: Sequence[str]) -> dict[str, SpaceContext]:
    """Create ``space_keys`` and one Writer whose key reads and writes all of them; a context per space."""
    for key in space_keys:
        await spaces.upsert_space(db, key, key.title())
    await users.upsert_user(db, "bench", "bench@example.com", "Bench", Role.WRITER, True)
    _, plaintext = await apikeys.create_key(
        db,
        "bench-key",
        "bench",
        [GrantSpec(key, Access.READ_WRITE) for key in space_keys],
        default_space=space_keys[0],
    )
    caller = await identity.authenticate(db, plaintext)
    return {key: identity.resolve_space(caller, key) for key in space_keys}


def questions_through_int8(embedder: Embedder) -> bool:
    """Whether ``embedder`` embeds a question through the model's int8 copy."""
    if not isinstance(embedder, LocalEmbedder):
        return False
    return embedder.model.short_runtime == "onnxruntime" and embedder.model.queries_differ


async def server_embedder(settings: Settings) -> Embedder:
    """The in-process embedder as ``memory-mcp serve`` makes it: short passes through ONNX Runtime
    and questions through its int8 copy (unless the settings turn it off), waited for, so that
    every question of a run is embedded the way a server embeds it."""
    embedder = await make_embedder(settings, short_passes_on_onnx=True)
    if isinstance(embedder, LocalEmbedder):
        await asyncio.to_thread(embedder.model.short_runtime_settled.wait)
        int8 = ", int8 copy" if questions_through_int8(embedder) else ""
        print(f"questions embedded as a server embeds them: {embedder.model.short_runtime}{int8}")
    return embedder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_process(
    prefix: str, stdout: int = subprocess.DEVNULL, extra_args: Sequence[str] = ()
) -> Iterator[tuple[subprocess.Popen[bytes], Path, int]]:
    """A ``memory-mcp serve`` process on a fresh temporary data dir and a free port (warning-level
    logs; ``extra_args`` added to its command line, e.g. ``--database-url``): yields the process,
    the data dir and the port; stops it (SIGTERM, which also stops its embedded PostgreSQL) and
    removes the data dir afterwards.

    The server reads the static table from :func:`static_table_dir`, as every server on a machine
    that has made it reads it from the machine's cache, instead of distilling it first: distilling (a
    minute of both cores on a busy 2-core machine) ran beside the measured work and took the saves
    of ``bench.locomo`` from 54.5/s to 47.8/s."""
    static_dir = static_table_dir()
    data_dir = Path(tempfile.mkdtemp(prefix=prefix))
    port = free_port()
    env = {**os.environ, "MEMORY_MCP_LOG_LEVEL": "warning"}
    if static_dir is not None:
        env["MEMORY_MCP_STATIC_EMBEDDING_DIR"] = str(static_dir)
    server = subprocess.Popen(
        [
            sys.executable,
            *("-m", "memory_mcp.cli", "serve", "--data-dir", str(data_dir), "--port", str(port)),
            *extra_args,
        ],
        stdout=stdout,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        yield server, data_dir, port
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)


def static_table_dir() -> Path | None:
    """Where the benchmarks keep the static table (the one the in-process benchmarks load: the
    machine's cache unless ``MEMORY_MCP_STATIC_EMBEDDING_DIR`` says otherwise), distilled there
    first if it is not yet; None when the static embedding is off."""
    from memory_mcp.core.settings import Settings
    from memory_mcp.embedder.static import load_static_model

    settings = Settings()
    if not settings.static_embedding:
        return None
    load_static_model(settings.static_embedding_cache_dir)
    return settings.static_embedding_cache_dir


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (no interpolation: with 200 samples p99 is the second largest)."""
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(pct / 100.0 * len(ordered) + 0.5) - 1))
    return ordered[index]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def machine() -> str:
    """One line describing where the figures came from."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    memory = ""
    try:
        with open("/proc/meminfo") as f:
            kib = int(next(line.split()[1] for line in f if line.startswith("MemTotal")))
        memory = f", {kib / 1024 / 1024:.0f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        pass
    return f"{os.cpu_count()} CPU cores ({cpu}){memory}, no GPU, Python {platform.python_version()}"


def plain_encoding_seconds(texts: Sequence[str], batch_size: int, modes: Sequence[str]) -> dict[str, float]:
    """Seconds the plain model takes to encode ``texts`` in batches, nothing around it, in each
    number format of ``modes`` (``fp32``, ``bf16``): the rate the model allows, which ingest
    figures are compared with. Each model is warmed up first, untimed."""
    from memory_mcp.embedder.model import encode, load_model

    seconds = {}
    for mode in modes:
        model = load_model(None, "cpu", precision="fp32" if mode == "fp32" else "bf16")
        encode(model, list(texts[:batch_size]), batch_size=batch_size)
        started = time.perf_counter()
        for start in range(0, len(texts), batch_size):
            encode(model, list(texts[start : start + batch_size]), batch_size=batch_size)
        seconds[mode] = time.perf_counter() - started
    return seconds
