"""Infrastructure shared by every component: settings, metrics, logs, database preparation and the
embedding backends' table. Server, operator and embedder import it without importing the command line."""

import os
from importlib.metadata import PackageNotFoundError, version

# ONNX Runtime (the embedder's short passes, faster-whisper's voice detection) sends usage telemetry
# to its vendor by default on Linux since 1.29 and writes a device id under the home folder. A
# self-hosted memory service phones no one: this turns it off before any component loads it (read
# once, when the runtime starts; an operator may still set it otherwise).
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

# The distribution every image installs (the CLI and this package); the version all components report.
DISTRIBUTION = "memory-mcp-core"


def package_version() -> str:
    """The installed version, or ``0+unknown`` when run from a tree that was never installed."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"


def url_host(host: str) -> str:
    """``host`` as it stands in a URL or a Host header: an IPv6 address in brackets (RFC 3986)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def local_origin(host: str, port: int) -> str:
    """The origin a client on this machine reaches a server bound to ``host`` at: a wildcard bind
    (``0.0.0.0`` or ``::``) is reached on the IPv4 loopback."""
    return f"http://{url_host('127.0.0.1' if host in ('0.0.0.0', '::') else host)}:{port}"
