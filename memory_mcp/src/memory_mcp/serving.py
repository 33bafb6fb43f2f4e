"""What `memory-mcp serve` says around uvicorn: a taken port before anything loads, and the ready
lines (with the real port, and what to paste into a shell and a client) once it is listening."""

from __future__ import annotations

import atexit
import logging
import signal
import socket
import sys
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


# The stop signal that came during start-up, if one did. An exception raised by a signal handler
# is lost when it lands in a callback Python only reports (a weak reference's, a finaliser's), and
# once one start went on to serve after it: ReadyServer looks here before it serves.
_stop_requested: list[int] = []


def exit_on_sigterm() -> None:
    """From now on SIGTERM ends ``serve`` as Ctrl-C does: by an exception, so that what start-up
    began (the embedded PostgreSQL) is stopped on the way out. Python's default ends the process on
    the spot and left PostgreSQL running. uvicorn takes the signal over while it serves, and raises
    it again once it has shut down: this handler then ends start-up's work the same way."""

    def stop(signum: int, _frame: FrameType | None) -> None:
        _stop_requested.append(signum)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    atexit.register(_end_by_the_signal)


def _end_by_the_signal() -> None:
    """The last thing at exit (registered before PostgreSQL's own stop, so run after it): a serve
    stopped by SIGTERM ends killed by that signal, as a process with the default handler does and
    as service managers read a clean stop, not with exit status 143."""
    if _stop_requested:
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(_stop_requested[0], signal.SIG_DFL)
        signal.raise_signal(_stop_requested[0])


class ReadyServer(uvicorn.Server):
    """A uvicorn server that calls ``on_ready(port)`` once it accepts connections."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[int], None]) -> None:
        super().__init__(config)
        self._on_ready = on_ready

    def run(self, sockets: list[socket.socket] | None = None) -> None:
        if _stop_requested:  # a stop during start-up whose exception was lost: do not serve
            raise SystemExit(128 + _stop_requested[0])
        super().run(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if not self.started:
            # Still starting: uvicorn would let the app's start-up (the model's loading: seconds
            # idle, tens of seconds on a busy machine) run to its end before it looked at the
            # signal. Nothing is served yet, so nothing needs draining: leave now (the loading's
            # daemon thread stays behind; serve's own stop ends the embedded PostgreSQL). uvicorn
            # would log the start-up's cancellation as an error with its traceback: it is none.
            # Should this exception be lost, should_exit (set above) still ends the start-up.
            logging.getLogger("uvicorn.error").disabled = True
            raise SystemExit(128 + sig)

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
