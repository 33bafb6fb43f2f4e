"""`memory-mcp serve` as a person runs it: a real process, the embedded PostgreSQL, signals, restarts."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx2
import psutil
import pytest

from tests.embedder.support import make_small_teacher
from tests.server.conftest import free_port


def postgres_running(data_dir: Path) -> bool:
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "postgres" and str(data_dir / "pg") in " ".join(proc.info["cmdline"] or []):
            return True
    return False


class Served:
    """``serve`` in a process of its own, ready. Its stderr is piped, or written to ``log`` (for a
    test that reads it while the server runs); ``drop`` names variables it does not inherit."""

    def __init__(self, data_dir: Path, log: Path | None = None, drop: Sequence[str] = (), **env: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        inherited = {k: v for k, v in os.environ.items() if k not in drop}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memory_mcp.cli",
                "serve",
                "--data-dir",
                str(data_dir),
                "--port",
                str(self.port),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if log is None else log.open("w"),
            text=True,
            env={**inherited, "MEMORY_MCP_LOG_LEVEL": "warning", **env},
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.proc.communicate()[1] if log is None else log.read_text()
            try:
                if httpx2.get(f"{self.base}/readyz", timeout=2).status_code == 200:
                    return
            except httpx2.HTTPError:
                pass
            time.sleep(0.5)
        raise AssertionError("server did not become ready")

    def stop(self, sig: int) -> tuple[int, str]:
        self.proc.send_signal(sig)
        out, _ = self.proc.communicate(timeout=60)
        return self.proc.returncode, out


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Outside pytest's private tmp dir: PostgreSQL runs as its own system user.
    path = Path(tempfile.mkdtemp(prefix="memory-mcp-serve-"))
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_first_start_restart_and_clean_stop(data_dir: Path, sig: int) -> None:
    first = Served(data_dir)
    key_file = data_dir / "bootstrap-key"
    key = key_file.read_text().strip()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    auth = {"Authorization": f"Bearer {key}"}
    saved = httpx2.post(
        f"{first.base}/v1/memories", json={"content": "Survives a restart."}, headers=auth
    ).json()
    assert saved["status"] == "saved"
    assert postgres_running(data_dir)
    _, out = first.stop(sig)
    assert key in out  # printed exactly once, on the first start
    assert not postgres_running(data_dir)  # stopped with the server, not left behind

    second = Served(data_dir)
    try:
        listed = httpx2.get(f"{second.base}/v1/memories", headers=auth).json()
        assert [m["content"] for m in listed["memories"]] == ["Survives a restart."]
        assert key_file.read_text().strip() == key  # no second bootstrap
    finally:
        _, out = second.stop(signal.SIGTERM)
    assert "mmk_" not in out
    assert not postgres_running(data_dir)


def test_bootstrap_can_be_turned_off(data_dir: Path) -> None:
    served = Served(data_dir, MEMORY_MCP_BOOTSTRAP="false")
    _, out = served.stop(signal.SIGTERM)
    assert not (data_dir / "bootstrap-key").exists()
    assert "mmk_" not in out


def test_cli_reports_bad_settings_clearly(data_dir: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "memory_mcp.cli",
            "serve",
            "--data-dir",
            str(data_dir),
            "--database-url",
            "mysql://x",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "invalid setting database_url" in result.stderr and "postgresql://" in result.stderr


def test_migrate_is_idempotent(data_dir: Path) -> None:
    def migrate() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "memory_mcp.cli", "migrate", "--data-dir", str(data_dir)],
            capture_output=True,
            text=True,
            timeout=120,
        )

    # Only serve makes a data dir: a path without one is refused, and stays without one.
    refused = migrate()
    assert refused.returncode == 1 and f"no data dir at {data_dir.resolve()}" in refused.stderr
    assert not (data_dir / "pg").exists()
    from memory_mcp.store.embedded import EmbeddedPostgres

    made = EmbeddedPostgres(data_dir)  # what serve sets up there before it migrates
    made.start()
    made.stop()
    for _ in range(2):
        result = migrate()
        assert result.returncode == 0, result.stderr
        assert "schema is at revision" in result.stderr
    assert not postgres_running(data_dir)


def test_backfill_embeds_what_was_saved_without_vectors(data_dir: Path) -> None:
    import asyncio

    from memory_mcp.core.database import prepare_database
    from memory_mcp.core.settings import Settings
    from memory_mcp.store import identity, memories

    async def arrange(prepared) -> None:  # type: ignore[no-untyped-def]
        db = prepared.open(pool_size=2)
        try:
            caller = await identity.authenticate(db, await identity.bootstrap(db))
            ctx = identity.resolve_space(caller, None)
            for i in range(3):
                await memories.save_memory(db, ctx, f"Saved while the embedder was down, number {i}.")
            assert await memories.count_missing_embeddings(db) == 3
        finally:
            await db.close()

    async def missing(prepared) -> int:  # type: ignore[no-untyped-def]
        db = prepared.open(pool_size=1)
        try:
            return await memories.count_missing_embeddings(db)
        finally:
            await db.close()

    prepared = prepare_database(Settings(data_dir=data_dir))
    try:
        asyncio.run(arrange(prepared))
        result = subprocess.run(
            [sys.executable, "-m", "memory_mcp.cli", "backfill", "--data-dir", str(data_dir)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        assert "embedded 3 memories" in result.stderr
        assert asyncio.run(missing(prepared)) == 0
    finally:
        prepared.stop()


def test_the_ready_line_comes_once_the_server_listens_with_lines_to_paste(data_dir: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memory_mcp.cli", "serve", "--data-dir", str(data_dir), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("MEMORY_MCP_")},
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stderr], [], [], 1)
            if not ready:
                assert proc.poll() is None, "".join(lines)
                continue
            line = proc.stderr.readline()  # type: ignore[union-attr]
            assert line, "".join(lines)
            lines.append(line)
            if "Memory-MCP is ready" in line:
                # No retry: the line promises the port accepts connections already.
                assert httpx2.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200
                break
        else:
            raise AssertionError("no ready line: " + "".join(lines))
        for _ in range(3):
            lines.append(proc.stderr.readline())  # type: ignore[union-attr]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    text = "".join(lines) + err
    url = f"http://127.0.0.1:{port}/mcp"
    assert f"Memory-MCP is ready: {url}\n" in text
    assert f'  export MEMORY_MCP_KEY="$(cat {data_dir / "bootstrap-key"})"\n' in text
    assert (
        f"  claude mcp add --scope project --transport http memory {url} "
        "--header 'Authorization: Bearer ${MEMORY_MCP_KEY}'\n"
    ) in text
    # A quiet first start: no warnings from libraries, no migration chatter, the notice on one line.
    assert "Warning" not in text and "alembic" not in text, text
    assert "created user 'admin' (Writer), space 'default' and this API key (shown once, also in" in text
    # Only serve makes a data dir, and says so.
    assert f"new data dir at {data_dir}: setting up its embedded PostgreSQL\n" in text
    assert out.strip().startswith("mmk_")


def test_a_taken_port_fails_at_once_before_the_database_or_the_model(data_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "memory_mcp.cli",
                "serve",
                "--data-dir",
                str(data_dir),
                "--port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}: the port is already in use; choose another with --port" in (
        " ".join(result.stderr.split())
    )
    assert "Memory-MCP is ready" not in result.stderr
    assert not (data_dir / "pg").exists()  # PostgreSQL was never set up, so the model never loaded


# The run's shared static table (tests/conftest.py): the tests below start from a new machine's
# cache instead, so that they see the table made.
SHARED_TABLE = "MEMORY_MCP_STATIC_EMBEDDING_DIR"


@pytest.fixture(scope="module")
def small_teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A teacher whose table distils in about a second (the packaged MiniLM's takes minutes)."""
    folder = tmp_path_factory.mktemp("teacher")
    make_small_teacher(folder)
    return folder


@pytest.fixture
def machine_cache() -> Iterator[Path]:
    """The cache of a machine that has never run Memory-MCP."""
    path = Path(tempfile.mkdtemp(prefix="memory-mcp-cache-"))
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


def tables(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if p.name.startswith("static-embedding"))


def staging(cache: Path) -> list[Path]:
    """Folders of a distillation under way, or left half-written."""
    return sorted(p for p in cache.iterdir() if p.is_dir() and p.name.startswith("."))


def wait_for_line(log: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert time.monotonic() < deadline, f"no {text!r} in: {log.read_text()}"
        time.sleep(0.5)


def test_a_second_data_dir_reads_the_machines_table_and_precision_verdict(
    data_dir: Path, small_teacher: Path, machine_cache: Path, tmp_path: Path
) -> None:
    """The first start on a machine distils the table into the machine's cache and runs the
    precision probe; a new data dir then reads both (no distillation, no probe: a verdict edited
    in the cache is the one that runs), and neither data dir holds a table."""
    env = {
        "MEMORY_MCP_CACHE_DIR": str(machine_cache),
        "MEMORY_MCP_STATIC_EMBEDDING_TEACHER": str(small_teacher),
        "MEMORY_MCP_EMBEDDING_PRECISION": "auto",
        "MEMORY_MCP_LOG_LEVEL": "info",
    }
    first_log = tmp_path / "first.log"
    first = Served(data_dir, log=first_log, drop=(SHARED_TABLE,), **env)
    try:
        wait_for_line(first_log, "static embedding ready", 300)
    finally:
        first.stop(signal.SIGTERM)
    log = " ".join(first_log.read_text().split())
    assert f"distilling the static embedding into {machine_cache}" in log and "precision probe:" in log
    [table] = tables(machine_cache)
    assert not staging(machine_cache)
    verdicts = json.loads((machine_cache / "precision.json").read_text())
    [(key, verdict)] = verdicts.items()
    # The other mode than this machine measured: the second start can only run it by reading it.
    flipped = "fp32" if verdict["mode"] == "bf16" else "bf16"
    verdicts[key] = {**verdict, "mode": flipped, "reason": "edited by the test"}
    (machine_cache / "precision.json").write_text(json.dumps(verdicts))

    other = Path(tempfile.mkdtemp(prefix="memory-mcp-serve-"))
    second_log = tmp_path / "second.log"
    try:
        second = Served(other, log=second_log, drop=(SHARED_TABLE,), **env)
        try:
            wait_for_line(second_log, "static embedding ready", 120)
            metrics = httpx2.get(f"{second.base}/metrics", timeout=10).text
        finally:
            second.stop(signal.SIGTERM)
        log = " ".join(second_log.read_text().split())
        assert "distilling" not in log and "precision probe:" not in log, log
        assert f"runs in {flipped}: kept from this CPU's probe (edited by the test)" in log
        assert f'memory_mcp_embedder_precision{{mode="{flipped}"}} 1.0' in metrics
        assert tables(machine_cache) == [table]
        for folder in (data_dir, other):
            assert not [p for p in folder.iterdir() if p.name.startswith("static-embedding")]
    finally:
        subprocess.run(["rm", "-rf", str(other)], check=False)


def test_two_commands_that_want_the_table_at_once_distil_it_once(
    small_teacher: Path, machine_cache: Path, db_urls: tuple[str, str]
) -> None:
    """Two backfills on a new machine, at the same time: one distils, the other waits for it or
    finds the table made; both compute their static vectors; one whole table, nothing half-written."""
    env = {k: v for k, v in os.environ.items() if k != SHARED_TABLE}
    env |= {
        "MEMORY_MCP_CACHE_DIR": str(machine_cache),
        "MEMORY_MCP_STATIC_EMBEDDING_TEACHER": str(small_teacher),
    }
    command = [sys.executable, "-m", "memory_mcp.cli", "backfill", "--database-url", db_urls[1]]
    procs = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    said = []
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        said.append(" ".join(err.split()))
    assert all("computed 0 static vectors" in err for err in said), said
    assert sum("distilling the static embedding into" in err for err in said) == 1, said
    [table] = tables(machine_cache)
    assert (table / "manifest.json").is_file() and not staging(machine_cache)


def test_an_import_goes_on_without_a_table_that_is_not_made(
    machine_cache: Path, db_urls: tuple[str, str], tmp_path: Path
) -> None:
    """An import never waits minutes for a distillation: without a table on this machine it
    imports at once and leaves the static vectors to the backfill."""
    env = {k: v for k, v in os.environ.items() if k != SHARED_TABLE}
    env["MEMORY_MCP_CACHE_DIR"] = str(machine_cache)
    base = [sys.executable, "-m", "memory_mcp.cli"]
    created = subprocess.run(
        [*base, "space", "create", "notes", "--database-url", db_urls[1]],
        capture_output=True,
        text=True,
        env=env,
    )
    assert created.returncode == 0, created.stderr
    lines = [
        {
            "type": "memory",
            "id": f"m{i}",
            "content": f"Imported fact number {i}.",
            "createdAt": "2026-01-01T00:00:00+00:00",
        }
        for i in range(3)
    ]
    path = tmp_path / "memories.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = subprocess.run(
        [*base, "import", str(path), "--space", "notes", "--database-url", db_urls[1]],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert "imported 3 memories" in said
    assert "static vectors left to the backfill: the static table is not made on this machine yet" in said
    assert not tables(machine_cache)


def test_sigterm_while_the_table_is_distilled_stops_serve_and_postgres_at_once(
    data_dir: Path, machine_cache: Path, tmp_path: Path
) -> None:
    """A stop during the distillation (minutes of torch work with the packaged teacher) ends it and
    the server at once, with PostgreSQL, and leaves no table or half of one."""
    log = tmp_path / "serve.log"
    served = Served(
        data_dir,
        log=log,
        drop=(SHARED_TABLE,),
        MEMORY_MCP_CACHE_DIR=str(machine_cache),
        MEMORY_MCP_LOG_LEVEL="info",
    )
    wait_for_line(log, "distilling the static embedding into", 120)
    children = [
        child
        for child in psutil.Process(served.proc.pid).children()
        if "static_cache" in " ".join(child.cmdline())
    ]
    assert children
    started = time.monotonic()
    served.proc.send_signal(signal.SIGTERM)
    served.proc.communicate(timeout=120)
    # Timings belong in bench/first_start.py (seconds); this bound only tells a stop from the
    # minutes a distillation in a thread ran on for, with room for a busy machine.
    assert time.monotonic() - started < 45
    assert not postgres_running(data_dir)
    assert not [child for child in children if child.is_running()]
    assert not tables(machine_cache) and not staging(machine_cache)


def test_the_embedded_buffer_cache_follows_the_machine_or_the_setting(data_dir: Path) -> None:
    import psycopg

    from memory_mcp.store.embedded import SETTINGS_FILE, EmbeddedPostgres, machine_memory_mb, server_settings

    def shared_buffers() -> str:
        attached = EmbeddedPostgres(data_dir)  # the running server's PostgreSQL, as a second holder
        attached.start()
        try:
            with psycopg.connect(attached.superuser_url.replace("+psycopg", "")) as conn:
                row = conn.execute("SHOW shared_buffers").fetchone()
        finally:
            attached.stop()
        assert row is not None
        return str(row[0])

    # The first start creates the cluster and already runs on the setting.
    first = Served(data_dir, MEMORY_MCP_EMBEDDED_SHARED_BUFFERS_MB="200")
    try:
        assert shared_buffers() == "200MB"
        # A second process that attaches to the running cluster leaves its settings alone.
        assert (data_dir / "pg" / SETTINGS_FILE).read_text() == "shared_buffers = '200MB'\n"
    finally:
        first.stop(signal.SIGTERM)
    second = Served(data_dir)  # no setting: a quarter of the machine's memory, 128 MB to 1 GB
    try:
        expected = server_settings(machine_memory_mb())["shared_buffers"]
        assert shared_buffers() == expected.replace("1024MB", "1GB")
        assert expected != "200MB"
    finally:
        second.stop(signal.SIGTERM)


@pytest.mark.parametrize(
    ("memory_mb", "setting", "expected"),
    [(512, None, "128MB"), (2048, None, "512MB"), (24 * 1024, None, "1024MB"), (24 * 1024, 64, "64MB")],
)
def test_the_buffer_cache_is_a_quarter_of_memory_within_bounds(
    memory_mb: int, setting: int | None, expected: str
) -> None:
    from memory_mcp.store.embedded import server_settings

    assert server_settings(memory_mb, setting) == {"shared_buffers": expected}
