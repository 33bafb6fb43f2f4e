"""What `memory-mcp serve` says around uvicorn: a taken port before anything loads, and the ready
lines (with the real port, and what to paste into a shell and a client) once it is listening."""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import uvicorn
from rich.console import Console

from memory_mcp.core import local_origin

console = Console(stderr=True)


def port_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on now (taken, or not an address here), or None."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        return f"not an address of this machine ({exc.strerror})"
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            return "the port is already in use" if exc.errno == 98 else (exc.strerror or str(exc))
    return None


def exit_on_sigterm() -> None:
    """From now on SIGTERM ends ``serve`` as Ctrl-C does: by an exception, so that what start-up
    began (the embedded PostgreSQL) is stopped on the way out. Python's default ends the process on
    the spot and left PostgreSQL running. uvicorn takes the signal over while it serves, and raises
    it again once it has shut down: this handler then ends the process (exit status 143)."""

    def stop(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


class ReadyServer(uvicorn.Server):
    """A uvicorn server that calls ``on_ready(port)`` once it accepts connections."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[int], None]) -> None:
        super().__init__(config)
        self._on_ready = on_ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and not self.should_exit:
            bound = [s.getsockname()[1] for server in self.servers for s in server.sockets]
            self._on_ready(bound[0] if bound else self.config.port)


def print_ready(host: str, port: int, key_file: Path) -> None:
    """The ready line, then lines to paste: the key into the shell, and one client's configuration."""
    url = f"{local_origin(host, port)}/mcp"
    key = f'"$(cat {key_file})"' if key_file.exists() else "<your API key>"
    console.print(f"[bold green]Memory-MCP is ready:[/bold green] {url}", soft_wrap=True, highlight=False)
    console.print(
        "Paste into a shell, then add the server to Claude Code (docs/clients.md has the others):",
        soft_wrap=True,
    )
    for line in (
        f"  export MEMORY_MCP_KEY={key}",
        f"  claude mcp add --scope project --transport http memory {url} "
        "--header 'Authorization: Bearer ${MEMORY_MCP_KEY}'",
    ):
        console.print(line, soft_wrap=True, highlight=False, markup=False)
