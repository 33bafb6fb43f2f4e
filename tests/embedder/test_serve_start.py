"""A start of the Serve embedder that fails says why and leaves nothing behind for the next start.

Apart from ``test_serve.py``: its module-wide service would be running while these tests start
their own.
"""

from __future__ import annotations

import socket
import subprocess
import sys

import httpx2
import pytest

pytest.importorskip("ray")

import ray

from memory_mcp.core.settings import Settings
from memory_mcp.embedder.serve import run_embedder_service, stop_embedder_service
from tests.embedder.support import free_port


def start(port: int) -> str:
    return run_embedder_service(
        Settings(embedder_metrics_port=free_port()),
        host="127.0.0.1",
        port=port,
        num_cpus=1,
        ray_num_cpus=2,
        block=False,
    )


def test_a_start_that_fails_takes_down_what_it_started_and_the_next_start_serves_on_its_own_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        # Serve's HTTP proxy cannot bind a port another process listens on.
        with pytest.raises(Exception, match="bind"):
            start(taken.getsockname()[1])
    # A Ray left running would hold a Serve whose proxy keeps the old port, and the next start
    # would join it instead of starting its own.
    assert not ray.is_initialized()

    port = free_port()
    url = start(port)
    try:
        assert url == f"http://127.0.0.1:{port}"
        info = httpx2.get(f"{url}/info", timeout=60)
        assert info.status_code == 200
        assert info.json()["dim"] == 384
    finally:
        stop_embedder_service()
    assert not ray.is_initialized()


def test_the_embedder_command_refuses_a_taken_port_before_ray_starts():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "memory_mcp.cli", "embedder", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}: the port is already in use; choose another with --port" in (
        " ".join(result.stderr.split())
    )
    assert "Ray instance" not in result.stderr  # refused before Ray, not by Serve's proxy seconds later
