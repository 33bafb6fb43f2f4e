"""`memory-mcp serve` as a person runs it: a real process, the embedded PostgreSQL, signals, restarts."""

from __future__ import annotations

import os
import select
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import psutil
import pytest

from tests.server.conftest import free_port


def postgres_running(data_dir: Path) -> bool:
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "postgres" and str(data_dir / "pg") in " ".join(proc.info["cmdline"] or []):
            return True
    return False


class Served:
    def __init__(self, data_dir: Path, **env: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
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
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "MEMORY_MCP_LOG_LEVEL": "warning", **env},
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.proc.communicate()[1]
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
    for _ in range(2):
        result = subprocess.run(
            [sys.executable, "-m", "memory_mcp.cli", "migrate", "--data-dir", str(data_dir)],
            capture_output=True,
            text=True,
            timeout=120,
        )
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
