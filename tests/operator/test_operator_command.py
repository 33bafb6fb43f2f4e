"""`memory-mcp operator` as a process: kubeconfig login, probes, a reconcile, and a clean SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import yaml

from tests.operator.support import Cluster


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "emulator", "cluster": {"server": server}}],
                "users": [{"name": "operator", "user": {"token": "test"}}],
                "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "operator"}}],
                "current-context": "emulator",
            }
        )
    )
    return path


async def test_operator_command_serves_reconciles_and_stops_on_sigterm(
    cluster: Cluster, db_urls: tuple[str, str], tmp_path: Path
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", cluster.url)),
        "MEMORY_MCP_DATABASE_URL": db_urls[1],
        "MEMORY_MCP_OPERATOR_PORT": str(port),
        "MEMORY_MCP_LOG_FORMAT": "text",
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)
    log = tmp_path / "operator.log"
    with log.open("w") as output:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "memory_mcp.cli", "operator", "--host", "127.0.0.1", "--resync-seconds", "5"),
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(600):
                assert process.returncode is None, log.read_text()
                try:
                    async with http.get(f"http://127.0.0.1:{port}/healthz") as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"the operator never became healthy:\n{log.read_text()}")
            await cluster.create("Space", "alpha", {"displayName": "Alpha"})
            ready = await cluster.ready_because("Space", "alpha", "Reconciled")
            assert ready["status"] == "True"
            async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
                assert 'memory_mcp_reconcile_total{kind="Space",outcome="ready"}' in await response.text()
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 60) == 0, log.read_text()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
