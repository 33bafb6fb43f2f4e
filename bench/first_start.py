"""First start: what a new user waits for, from process start (issue 36's start-up targets).

Every figure is wall time from the start of a ``memory-mcp`` process, as a person runs it:

- the first ``serve`` on a new data dir of a new machine (an empty machine cache): until it is
  ready, and until search has all three signals (the static table distilled and loaded);
- ``serve`` on a second new data dir of the same machine (the table and the precision verdict read
  from the machine's cache): until ready, and until three signals;
- a warm restart of that data dir: until ready, and until three signals;
- ``memory-mcp import`` of 3 memories into a new data dir (made by ``space create``), start to exit;
- SIGTERM at several moments of start-up (setting up PostgreSQL, loading the model, serving, on a
  new data dir; during the distillation on a new machine cache): seconds until the process exits, and whether PostgreSQL or
  the distillation outlived it.

It runs in throw-away folders (data dirs and machine caches); the user's are never touched.

    python -m bench.first_start
    python -m bench.first_start --skip-distil     # no first start on an empty cache (minutes when busy)
    python -m bench.first_start --signal-delays 1 2 4 8   # also SIGTERM so long after start
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.common import free_port, machine

READY = "Memory-MCP is ready"
THREE_SIGNALS = "static embedding ready"
DISTILLING = "distilling the static embedding into"
CLI = [sys.executable, "-m", "memory_mcp.cli"]


@contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def environment(cache: Path) -> dict[str, str]:
    """A user's environment with this machine cache: none of the benchmarks' shared table."""
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_MCP_STATIC_EMBEDDING_DIR"}
    env |= {
        "MEMORY_MCP_CACHE_DIR": str(cache),
        "MEMORY_MCP_LOG_LEVEL": "info",
        "MEMORY_MCP_LOG_FORMAT": "text",
    }
    return env


@dataclass
class Serve:
    """A ``serve`` process, its log in a file, and when it started."""

    proc: subprocess.Popen[bytes]
    log: Path
    data_dir: Path
    started: float
    leftovers: list[int] = field(default_factory=list)  # child processes alive after the stop

    @classmethod
    def start(cls, data_dir: Path, cache: Path, log: Path) -> Serve:
        command = [*CLI, "serve", "--data-dir", str(data_dir), "--port", str(free_port())]
        with log.open("w") as out:
            started = time.monotonic()
            proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=out, env=environment(cache))
        return cls(proc, log, data_dir, started)

    def wait_for(self, text: str, timeout: float = 1800) -> float:
        """Seconds from the start until ``text`` appears in the log."""
        deadline = time.monotonic() + timeout
        while text not in self.log.read_text():
            if self.proc.poll() is not None:
                raise SystemExit(f"serve exited ({self.proc.returncode}): {self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise SystemExit(f"no {text!r} after {timeout:.0f} s: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)
        return time.monotonic() - self.started

    def stop(self) -> float:
        """Send SIGTERM; seconds until the process has exited."""
        children = psutil.Process(self.proc.pid).children(recursive=True)
        sent = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        took = time.monotonic() - sent
        self.leftovers = [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        return took

    def last_line(self) -> str:
        lines = [line for line in self.log.read_text().splitlines() if line.strip()]
        return lines[-1][:110] if lines else "(nothing logged yet)"


def postgres_left(data_dir: Path) -> bool:
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "postgres" and str(data_dir / "pg") in " ".join(proc.info["cmdline"] or []):
            return True
    return False


def serve_until_three_signals(label: str, data_dir: Path, cache: Path, logs: Path) -> None:
    served = Serve.start(data_dir, cache, logs / f"{label.replace(' ', '-')}.log")
    ready = served.wait_for(READY)
    three = served.wait_for(THREE_SIGNALS)
    distilled = DISTILLING in served.log.read_text()
    stop = served.stop()
    print(
        f"{label}: ready {ready:.1f} s, three signals {three:.1f} s"
        f"{' (distilled the table)' if distilled else ' (table read from the machine cache)'}; "
        f"SIGTERM -> exit {stop:.1f} s, PostgreSQL left: {postgres_left(data_dir)}",
        flush=True,
    )


def import_three(cache: Path, work: Path, logs: Path) -> None:
    """The quick start's import: into the data dir a first ``serve`` made (stopped again), to a
    space the command line created."""
    data_dir = work / "import-data"
    served = Serve.start(data_dir, cache, logs / "import-serve.log")
    served.wait_for(READY)
    served.stop()
    env = environment(cache)
    made = subprocess.run(
        [*CLI, "space", "create", "notes", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        env=env,
    )
    if made.returncode != 0:
        raise SystemExit(made.stderr)
    lines = [
        {"type": "memory", "id": f"m{i}", "content": text, "createdAt": "2026-01-01T00:00:00+00:00"}
        for i, text in enumerate(
            (
                "I prefer short written summaries over meetings.",
                "The staging cluster runs PostgreSQL 16 with pgvector.",
                "Maria owns the quarterly report; it is due on the fifteenth.",
            )
        )
    ]
    source = work / "three.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    started = time.monotonic()
    done = subprocess.run(
        [*CLI, "import", str(source), "--space", "notes", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        env=env,
    )
    took = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    said = " ".join(done.stderr.split())
    static = "static vectors left to the backfill" not in said
    print(
        f"import of 3 memories into a new data dir: {took:.1f} s "
        f"(static vectors {'computed' if static else 'left to the backfill'})",
        flush=True,
    )


def sigterm_after(delay: float, cache: Path, logs: Path, after: str | None = None) -> None:
    """SIGTERM ``delay`` seconds after the start, or after the line ``after`` appears in the log."""
    name = f"signal-{(after or 'start')[:12].replace(' ', '-')}-{delay:g}"
    with scratch("memory-mcp-bench-signal-") as data_dir:
        served = Serve.start(data_dir, cache, logs / f"{name}.log")
        at = served.wait_for(after) if after is not None else 0.0
        time.sleep(max(0.0, at + delay - (time.monotonic() - served.started)))
        sent = time.monotonic() - served.started
        phase = served.last_line()
        took = served.stop()
        print(
            f"SIGTERM {sent:.1f} s after start ({delay:g} s after {after or 'the start'!r}; last line: {phase!r}): "
            f"exit {took:.1f} s, PostgreSQL left: {postgres_left(data_dir)}, processes left: "
            f"{served.leftovers or 'none'}",
            flush=True,
        )


# Moments of a first start on a new data dir: setting up PostgreSQL, loading the model (the line
# after the bootstrap), serving.
PHASES = (
    (1.0, "setting up its embedded PostgreSQL"),
    (0.0, "First start: created"),
    (2.0, "First start: created"),
    (0.0, READY),
)


def sigterm_while_distilling(logs: Path) -> None:
    with scratch("memory-mcp-bench-signal-") as data_dir, scratch("memory-mcp-bench-cache-") as cache:
        served = Serve.start(data_dir, cache, logs / "signal-distilling.log")
        at = served.wait_for(DISTILLING)
        time.sleep(3)  # into the distillation itself, past the child's imports
        took = served.stop()
        tables = sorted(p.name for p in cache.iterdir() if p.is_dir())
        print(
            f"SIGTERM during the distillation ({at + 3:.0f} s after start): exit {took:.1f} s, "
            f"PostgreSQL left: {postgres_left(data_dir)}, processes left: {served.leftovers or 'none'}, "
            f"folders left in the cache: {tables or 'none'}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--skip-distil",
        action="store_true",
        help="no first start on an empty cache: the machine's table comes from the benchmarks' shared one",
    )
    parser.add_argument(
        "--signal-delays", type=float, nargs="*", default=[], help="also SIGTERM so many seconds after start"
    )
    parser.add_argument("--logs", type=Path, help="keep each process's log in this folder")
    args = parser.parse_args()
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}", flush=True)
    with scratch("memory-mcp-bench-cache-") as cache, scratch("memory-mcp-bench-") as work:
        logs = args.logs or work
        logs.mkdir(parents=True, exist_ok=True)
        if args.skip_distil:
            from bench.common import static_table_dir

            shared = static_table_dir()
            if shared is not None:
                for folder in shared.glob("static-embedding*"):
                    shutil.copytree(folder, cache / folder.name)
        else:
            with scratch("memory-mcp-bench-data-") as first:
                serve_until_three_signals("first serve, new machine, new data dir", first, cache, logs)
        second = work / "second-data"
        serve_until_three_signals("serve on a second new data dir", second, cache, logs)
        serve_until_three_signals("warm restart of that data dir", second, cache, logs)
        import_three(cache, work, logs)
        for delay in args.signal_delays:
            sigterm_after(delay, cache, logs)
        for delay, line in PHASES:
            sigterm_after(delay, cache, logs, after=line)
        sigterm_while_distilling(logs)
    print(f"load average at the end {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
