"""Fuzz harness: generated requests against a real `memory-mcp serve`; counts calls and 5xx answers.

Starts a server in its own process (embedded PostgreSQL in a temporary data dir, the in-process
embedder, the bootstrap key), then:

- REST: schemathesis generates requests for every operation of the OpenAPI document at
  /openapi.json, valid ones (positive) and ones that break the schema (negative), sent with the key;
- MCP: hypothesis draws arguments for every tool, hostile text included (NUL, control and format
  characters, over-long strings, wrong types, huge pages), called through the `mcp` SDK client over
  streamable HTTP; plus a few raw JSON-RPC bodies a client library would never send (lone
  surrogate escapes, CESU-8 bytes, NUL in names, bodies over the size limit).

Target: no 5xx, no tool call ending as an unhandled exception, and every log line of the server one
JSON object without a traceback of a request. Tool errors that do not read ``field: problem`` are
listed (they are reported, not failed).

    python -m bench.fuzz [--examples 60]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import requests
import schemathesis
from hypothesis import HealthCheck, Verbosity, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from schemathesis.core.result import Ok

from bench.load import free_port, wait_ready
from memory_mcp.store import validation

# A tool error reads "field: problem" (DESIGN.md, Errors); the field may be nested ("grants[0].space").
FIELD_PROBLEM = re.compile(r"^[A-Za-z][\w.\[\]-]*: \S")
# Whole-message errors that name no field because none is at fault (authorization, missing space).
NO_FIELD = re.compile(
    r"^((space|document|memory) '.*' not found|.* access to space '.*'|invalid, expired or revoked API key)"
)

NASTY = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "\x07\x1b[31m",
    "\u200b\u2060\ufeff",
    "\u3164",
    "\u202eevil",
    "%",
    "_",
    "\\",
    "'; DROP TABLE memories; --",
    "a" * (validation.MAX_CONTENT + 1),
    "b" * (validation.MAX_KEYWORD + 1),
    "default",
    "00000000-0000-0000-0000-000000000000",
    "../../etc/passwd",
    "\U0001f642" * 600,
]


def text(max_size: int) -> st.SearchStrategy[str]:
    """Any text a JSON client can send (lone surrogates cannot be encoded), and known troublemakers."""
    return st.one_of(
        st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=max_size),
        st.sampled_from(NASTY),
    )


WRONG = st.one_of(
    st.integers(), st.floats(allow_nan=False), st.booleans(), st.lists(st.integers(), max_size=3)
)


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of ``choices``, each drawn in proportion to its weight."""
    table = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.integers(0, len(table) - 1).flatmap(lambda i: table[i])


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the intended type, sometimes absent (None), sometimes the wrong type altogether.

    A call with one wrong argument stops at argument validation, so most calls must get every
    argument right to reach the service and the store.
    """
    return weighted((8, strategy), (1, st.none()), (1, WRONG))


PAGES = weighted(
    (6, st.integers(1, 5)), (2, st.integers(-3, 5)), (1, st.integers(-(2**63), 2**63)), (1, st.just(2**62))
)
LIMITS = weighted((6, st.integers(1, 50)), (2, st.integers(-3, 60)), (1, st.integers(-(2**31), 2**31)))
TAGS = weighted((3, st.just("default")), (1, text(80)))


def drop_none(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items() if v is not None}


TOOL_ARGS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "search_memory": st.fixed_dictionaries(
        {
            "query": maybe(text(2100)),
            "keyword": maybe(text(250)),
            "category": maybe(text(80)),
            "includeProfile": maybe(st.booleans()),
            "containerTag": maybe(TAGS),
            "limit": maybe(LIMITS),
        }
    ).map(drop_none),
    "add_memory": st.fixed_dictionaries(
        {
            "content": weighted((9, text(2100)), (1, WRONG)),
            "action": maybe(st.sampled_from(["save", "forget", "erase"])),
            "category": maybe(text(80)),
            "containerTag": maybe(TAGS),
        }
    ).map(drop_none),
    "listDocuments": st.fixed_dictionaries(
        {"page": maybe(PAGES), "limit": maybe(LIMITS), "containerTag": maybe(TAGS)}
    ).map(drop_none),
    "listMemories": st.fixed_dictionaries(
        {"page": maybe(PAGES), "limit": maybe(LIMITS), "containerTag": maybe(TAGS)}
    ).map(drop_none),
    "getDocument": st.fixed_dictionaries(
        {"documentId": weighted((4, st.uuids().map(str)), (4, text(80)), (1, WRONG))}
    ),
    "select-space": st.fixed_dictionaries({"space": weighted((8, TAGS), (1, WRONG))}),
    "listSpaces": st.just({}),
    "whoAmI": st.just({}),
}

RAW_MCP_BODIES: list[bytes] = [
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add_memory", '
    b'"arguments": {"content": "x\\ud800"}}}',
    b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "add_memory", '
    b'"arguments": {"content": "x\xed\xa0\x80"}}}',
    b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "search_\\u0000memory", "arguments": {}}}',
    b'{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "search_memory", '
    b'"arguments": {"keyword": "\\u0000"}}}',
    b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "listMemories", '
    b'"arguments": {"page": 4611686018427387904}}}',
    b'{"jsonrpc": "2.0", "id": 99999999999999999999999, "method": "tools/list"}',
    b'{"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "add_memory", "arguments": '
    + b"[" * 5000,
    b"\xff\xfe not json",
    b"[]",
    b'{"content": "' + b"x" * (2 * 1024 * 1024) + b'"}',
]


class Tally:
    """Calls and answers per surface; 5xx and unhandled tool errors are the failures."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.statuses: Counter[tuple[str, int]] = Counter()
        self.server_errors: list[str] = []
        self.unshaped: Counter[str] = Counter()
        self.unshaped_examples: dict[str, str] = {}
        self.lock = threading.Lock()

    def http(self, surface: str, label: str, status: int) -> None:
        with self.lock:
            self.calls[surface] += 1
            self.statuses[(surface, status // 100 * 100)] += 1
            if status >= 500:
                self.server_errors.append(f"{surface} {label}: HTTP {status}")

    def tool_error(self, tool: str, message: str) -> None:
        # mcp prefixes every tool error; an exception the tool did not map arrives as the bare prefix.
        prefix = f"Error executing tool {tool}"
        if message.strip() == prefix:
            self.server_errors.append(f"mcp {tool}: unhandled exception")
            return
        detail = message.removeprefix(f"{prefix}: ")
        if not FIELD_PROBLEM.match(detail) and not NO_FIELD.match(detail):
            self.unshaped[f"mcp {tool}"] += 1
            self.unshaped_examples.setdefault(f"mcp {tool}", detail[:160])


def fuzz_settings(examples: int) -> settings:
    """``examples`` generated cases, no deadline, no example database, nothing printed."""
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )


def fuzz_rest(base: str, key: str, examples: int, tally: Tally) -> None:
    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {key}"
    for result in schema.get_all_operations():
        if not isinstance(result, Ok):
            print(f"operation not fuzzed, its schema is invalid: {result.err()}")
            continue
        operation = result.ok()
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            label = f"{operation.method.upper()} {operation.path} ({mode.value})"
            if mode is schemathesis.GenerationMode.NEGATIVE and not any(operation.iter_parameters()):
                continue  # nothing to break (only the Authorization header, which is not in the schema)
            # Some operations have too few parameters for every example to break one.
            with contextlib.suppress(Unsatisfiable):
                rest_cases(
                    operation.as_strategy(generation_mode=mode), label, base, session, examples, tally
                )()


def rest_cases(
    strategy: st.SearchStrategy[Any],
    label: str,
    base: str,
    session: requests.Session,
    examples: int,
    tally: Tally,
) -> Callable[[], None]:
    @fuzz_settings(examples)
    @given(case=strategy)
    def run(case: Any) -> None:
        try:
            response = case.call(base_url=base, session=session, timeout=30)
        except (requests.exceptions.InvalidHeader, ValueError):
            return  # the client library refuses to send it (e.g. NUL in a header)
        tally.http("rest", label, response.status_code)
        if response.status_code >= 400:
            check_error_shape(label, response, tally)

    return run


def check_error_shape(label: str, response: schemathesis.Response, tally: Tally) -> None:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or set(body) != {"error", "message", "field"}:
        tally.unshaped[f"rest {label}"] += 1
        tally.unshaped_examples.setdefault(f"rest {label}", response.text[:160])


async def fuzz_mcp(base: str, key: str, examples: int, tally: Tally) -> None:
    loop = asyncio.get_running_loop()
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,
    ):
        tools = {tool.name for tool in (await client.list_tools()).tools}
        missing = tools - set(TOOL_ARGS)
        if missing:
            print(f"tools without a strategy here (not fuzzed): {', '.join(sorted(missing))}")

        def call(tool: str, arguments: dict[str, Any]) -> None:
            future = asyncio.run_coroutine_threadsafe(client.call_tool(tool, arguments), loop)
            try:
                result = future.result(timeout=120)
            except httpx2.HTTPStatusError as exc:
                tally.http("mcp", tool, exc.response.status_code)
                return
            except Exception as exc:  # a protocol error the client raises (an MCP error response)
                tally.http("mcp", tool, 200)
                tally.tool_error(tool, str(exc))
                return
            tally.http("mcp", tool, 200)
            if result.is_error:
                first = result.content[0] if result.content else None
                tally.tool_error(tool, getattr(first, "text", ""))

        def run_tool(tool: str, strategy: st.SearchStrategy[dict[str, Any]]) -> None:
            @fuzz_settings(examples)
            @given(arguments=strategy)
            def run(arguments: dict[str, Any]) -> None:
                call(tool, arguments)

            run()

        for tool, strategy in TOOL_ARGS.items():
            if tool in tools:
                await asyncio.to_thread(run_tool, tool, strategy)

    headers = {
        "Authorization": f"Bearer {key}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    async with httpx2.AsyncClient(timeout=60) as http:
        for body in RAW_MCP_BODIES:
            response = await http.post(f"{base}/mcp", content=body, headers=headers)
            tally.http("mcp-raw", body[:60].decode("latin-1"), response.status_code)
            raw_tool_result(body, response, tally)


def raw_tool_result(body: bytes, response: httpx2.Response, tally: Tally) -> None:
    """A tools/call answered 200 may still carry a tool error: classify it like the client's."""
    try:
        request, answer = json.loads(body), response.json()
    except (ValueError, RecursionError):
        return  # not a request this check can read (the bodies that are not JSON, or too deep)
    result = answer.get("result") if isinstance(answer, dict) else None
    if isinstance(request, dict) and isinstance(result, dict) and result.get("isError"):
        content = result.get("content") or [{}]
        tally.tool_error(str(request["params"]["name"]), str(content[0].get("text", "")))


def check_log(path: Path) -> tuple[int, list[str], list[str]]:
    """Lines the server wrote; its errors (JSON, level error); lines neither JSON nor start-up text."""
    lines = path.read_text(errors="replace").splitlines()
    errors, stray = [], []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            # Start-up output for a person (the key notice, the URL) is plain text on purpose.
            if line.startswith("Traceback") or re.search(r"\w(Error|Exception)\b", line):
                stray.append(line[:160])
            continue
        if isinstance(entry, dict) and entry.get("level") in ("error", "critical"):
            # The first exception of the chain is the cause; the formatter wrote it without data.
            chain = str(entry.get("exception", "")).splitlines()
            cause = next((line for line in chain if line and not line.startswith((" ", "Traceback"))), "")
            errors.append(f"{entry.get('logger')}: {entry.get('message')} | cause: {cause}"[:240])
    return len(lines), errors, stray


def report(tally: Tally, log_lines: int, errors: list[str], stray: list[str], seconds: float) -> int:
    total = sum(tally.calls.values())
    per_surface = ", ".join(f"{k} {v}" for k, v in sorted(tally.calls.items()))
    print(f"\ncalls: {total} in {seconds:.0f} s ({per_surface})")
    for surface in sorted(tally.calls):
        classes = {c: n for (s, c), n in tally.statuses.items() if s == surface}
        print(f"  {surface:8} " + "  ".join(f"{c // 100}xx: {n}" for c, n in sorted(classes.items())))
    print(f"5xx answers or unhandled tool exceptions: {len(tally.server_errors)}")
    for line, count in Counter(tally.server_errors).most_common(20):
        print(f"  {count:4} x {line}")
    unshaped = sum(tally.unshaped.values())
    print(f"errors not shaped as {{error, message, field}} (REST) or 'field: problem' (MCP): {unshaped}")
    for where, count in sorted(tally.unshaped.items()):
        print(f"  {count:4} x {where}, e.g. {tally.unshaped_examples[where]!r}")
    print(f"server log: {log_lines} lines; at level error: {len(errors)}; stray non-JSON lines: {len(stray)}")
    for line, count in Counter(errors + stray).most_common(10):
        print(f"  {count:4} x {line}")
    return 1 if tally.server_errors or errors or stray else 0


def serve(data_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "memory_mcp.cli", "serve", "--data-dir", str(data_dir), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
        env={
            **os.environ,
            "MEMORY_MCP_LOG_LEVEL": "warning",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--examples", type=int, default=60, help="generated cases per operation and mode / per tool"
    )
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="memory-mcp-fuzz-"))
    log = data_dir.parent / f"{data_dir.name}.log"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = serve(data_dir, port, log)
    started = time.monotonic()
    code = 1
    try:
        asyncio.run(wait_ready(base))
        key = (data_dir / "bootstrap-key").read_text().strip()
        tally = Tally()
        fuzz_rest(base, key, args.examples, tally)
        asyncio.run(fuzz_mcp(base, key, args.examples, tally))
        elapsed = time.monotonic() - started
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        code = report(tally, *check_log(log), elapsed)
    finally:
        if server.poll() is None:
            server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)
        log.unlink(missing_ok=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
