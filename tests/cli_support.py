"""The command line as a person runs it: `memory-mcp ...` in a real process, against a test database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


def cli(
    *args: str, stdin: str | None = None, columns: str | None = "200", timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``columns`` None: no terminal width at all, as under a pipe in cron or CI. ``timeout``: a
    command that loads the model takes minutes when the machine's cores are shared and busy."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["MEMORY_MCP_LOG_FORMAT"] = "text"
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run(
        [sys.executable, "-m", "memory_mcp.cli", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=timeout,
        env=env,
    )


class Admin:
    """The command line pointed at one test database (the owner role, as `migrate` would use)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def run(
        self, *args: str, stdin: str | None = None, columns: str | None = "200", timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        return cli(*args, "--database-url", self.url, stdin=stdin, columns=columns, timeout=timeout)

    def ok(
        self, *args: str, stdin: str | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        done = self.run(*args, stdin=stdin, timeout=timeout)
        assert done.returncode == 0, done.stderr
        return done

    def refused(self, *args: str, stdin: str | None = None) -> str:
        done = self.run(*args, stdin=stdin)
        assert done.returncode == 1, (done.stdout, done.stderr)
        return " ".join(done.stderr.split())

    def listing(self, group: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = json.loads(self.ok(group, "list", "--json").stdout)
        return rows
