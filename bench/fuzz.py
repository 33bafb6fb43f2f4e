"""Fuzz harness: generated requests against a real `memory-mcp serve`; counts calls and 5xx answers.

Starts a server in its own process (embedded PostgreSQL in a temporary data dir, the in-process
embedder, the bootstrap key), then:

- REST: schemathesis generates requests for every operation of the OpenAPI document at
  /openapi.json, valid ones (positive) and ones that break the schema (negative), sent with the key;
- MCP: hypothesis draws arguments for every tool, hostile text included (NUL, control and format
  characters, over-long strings, wrong types, huge pages), called through the `mcp` SDK client over
  streamable HTTP; plus a few raw JSON-RPC bodies a client library would never send (lone
  surrogate escapes, CESU-8 bytes, NUL in names, bodies over the size limit);
- uploads (POST /v1/documents, /v1/uploads, /v1/uploads/{token}): multipart bodies built by hand,
  so they can be broken: no closing boundary or cut inside the file, the upload token after the file
  part, a bogus, empty, hostile or missing token (valid ones are minted with prepare-file-upload),
  two files, hostile file names, titles and categories (NUL, control characters, 5,000 characters,
  credentials), wrong part and request Content-Types;
- the import route (POST /v1/spaces/{key}/import?from=FORMAT, with a key that has the Curate grant):
  every format and some wrong names, bad JSON, deep nesting, the wrong shape, a 3 MB line, zips with
  ../, absolute, drive-letter, symlink and NUL member names, a zip bomb, a truncated zip, hostile
  file names;
- decompression bombs (bench/upload_bombs.py: the 12,500 x 12,500 PNG and the .docx whose
  document.dat inflates to 1 GiB) uploaded, and waited for until the worker is done with them, while
  the server's RSS is sampled every 50 ms (psutil): before, after and the peak are printed;
- flood (``--requests``, the target 100,000): hostile requests to the auth and import paths from 8
  threads: forged bearers naming this server's signing key (a signature not ours, another issuer, a
  payload not JSON or nested past the parser), nested headers, cut and altered real tokens, on /v1,
  /mcp and /revoke; junk /token forms, /authorize queries and /register bodies; hostile import
  files (dry runs); after eight refresh races, each checked to revoke its grant;
- OAuth (/register, /authorize GET and POST, /authorize/consent, /token, /revoke, the metadata
  documents): hypothesis-drawn JSON, form bodies and query strings, repeated parameters, bad PKCE
  challenges, bad redirect URIs, oversized client metadata, client ids that are metadata-document
  URLs pointing at loopback, private or invalid hosts; then a real code and refresh token used
  wrongly (a wrong verifier, another redirect URI, the code twice, another client's refresh token,
  a revoked one).

The OpenAPI document names the query parameters of the upload and import routes (schemathesis
fuzzes those, a wrong ``from`` included) but not their multipart bodies, and leaves OAuth out: those
bodies are drawn here. The server runs with the registration limit raised and a 2 s limit on
fetching a client metadata document, so the fuzzer gets past both.

Target: no 5xx, no tool call ending as an unhandled exception, and every log line of the server one
JSON object without a traceback of a request. Tool errors that do not read ``field: problem``, REST
errors not shaped {error, message, field}, OAuth back-channel errors without {error,
error_description} and /authorize errors that are not an HTML page are listed (reported, not
failed); the raw request of each 5xx is printed to reproduce it.

    python -m bench.fuzz [--examples 60] [--requests 10000] [--surfaces rest,mcp,upload,import,oauth,bomb,flood]
    python -m bench.fuzz --surfaces flood --requests 100000   # the hostile-request target
    python -m bench.fuzz --examples 20          # the quick run
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import io
import json
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import requests
import schemathesis
from hypothesis import HealthCheck, Verbosity, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from schemathesis.core.result import Ok

from bench import paths, upload_bombs
from bench.common import free_port
from bench.load import wait_ready
from memory_mcp.store import validation
from tests.server.oauth_flow import REDIRECT, Flow, pkce

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
        self.repro: list[str] = []  # the raw requests that were answered 5xx (uploads, import, OAuth)
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


# --- uploads, the import route, decompression bombs and OAuth --------------------------------------
# The OpenAPI document names the query parameters of POST /v1/documents, /v1/uploads/{token} and
# /v1/spaces/{key}/import (schemathesis above fuzzes those, a wrong `from` included), but not their
# multipart bodies, and the OAuth endpoints are not in it at all: the bodies are drawn here.

CREDENTIALS = [
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "password=hunter2hunter2",
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "-----BEGIN RSA PRIVATE KEY-----",
]
HOSTILE_NAMES = [
    "",
    " ",
    ".",
    "..",
    "a\x00b.txt",
    "\x00",
    "note\r\nX-Injected: 1.txt",
    'quote".txt',
    "note \x07\x1b[31m.txt",
    "\u202etxt.exe",
    "../../etc/passwd",
    "/etc/passwd",
    "C:\\Windows\\win.ini",
    "\\\\server\\share\\x.md",
    "x" * 5000 + ".txt",
    "\U0001f642" * 300 + ".md",
    "é" * 200 + ".md",
    "\ud800.txt",
    *(f"{c}.txt" for c in CREDENTIALS),
]


def hostile_name() -> st.SearchStrategy[str | None]:
    return weighted(
        (4, st.sampled_from(HOSTILE_NAMES)),
        (2, st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=300)),
        (2, st.sampled_from(["note.txt", "notes.md", "data.csv", "scan.png", "export.zip"])),
        (1, st.none()),
    )


def hostile_field() -> st.SearchStrategy[str]:
    return weighted((3, text(120)), (2, st.sampled_from(CREDENTIALS)), (1, st.just("t" * 5000)))


FILE_BODIES = [
    b"The release train leaves on Thursday at ten; bring the signed forms.\n",
    b"",
    b"\x00\x01\x02\x03" * 64,
    b"%PDF-1.4\n%garbage that is not a PDF\n",
    b"\x89PNG\r\n\x1a\n" + b"\x00" * 40,
    b"PK\x03\x04" + b"\x00" * 40,
    b"GIF89a" + b"\xff" * 30,
    b"id,name\n1,\x00\n2,\xff\xfe\n",
    ("The deploy key is " + CREDENTIALS[0] + " for the staging bucket.\n").encode(),
    b"\xef\xbb\xbf" + "caf\u00e9 \u202e notes ".encode() * 20,
]
PART_TYPES = [None, "text/plain", "image/png", "application/x-msdownload", "text/plain; charset=\x07", "*/*"]


def request_type(boundary_ct: str) -> st.SearchStrategy[str]:
    """The request's Content-Type: mostly the right one, sometimes one that does not fit the body."""
    return weighted(
        (6, st.just(boundary_ct)),
        (1, st.sampled_from(["multipart/form-data", "multipart/form-data; boundary="])),
        (1, st.sampled_from(["application/json", "text/plain", "application/octet-stream"])),
        (1, st.just(boundary_ct.replace("form-data", "mixed"))),
        (1, st.sampled_from(["", "multipart/form-data; boundary=other"])),
    )


UPLOAD_CASE = st.fixed_dictionaries(
    {
        "route": st.sampled_from(["documents", "uploads-form", "uploads-url"]),
        "token": st.sampled_from(["valid", "valid", "bogus", "missing", "empty", "hostile"]),
        "token_after_file": st.booleans(),
        "file": weighted((5, st.sampled_from(FILE_BODIES)), (1, st.binary(max_size=512))),
        "filename": hostile_name(),
        "part_type": st.sampled_from(PART_TYPES),
        "fields": st.dictionaries(
            st.sampled_from(["title", "category", "containerTag", "extra"]), hostile_field(), max_size=3
        ),
        "query": st.dictionaries(st.sampled_from(["title", "category"]), hostile_field(), max_size=2),
        "ending": st.sampled_from(["closed", "closed", "closed", "no closing boundary", "cut in the file"]),
        "two_files": weighted((9, st.just(False)), (1, st.just(True))),
        "with_key": st.booleans(),
    }
)


class Sender:
    """Raw requests to the server with a tally; error answers checked for their shape."""

    def __init__(self, base: str, key: str, tally: Tally) -> None:
        self.base = base
        self.key = key
        self.tally = tally
        self.session = requests.Session()

    def send(self, surface: str, label: str, method: str, path: str, shape: str = "rest", **kw: Any) -> Any:
        try:
            response = self.session.request(
                method, self.base + path, timeout=120, allow_redirects=False, **kw
            )
        except (requests.exceptions.InvalidHeader, requests.exceptions.InvalidURL, ValueError):
            return None  # the client library refuses to send it
        except requests.exceptions.ConnectionError as exc:
            self.tally.server_errors.append(
                f"{surface} {label}: connection failed ({exc.__class__.__name__})"
            )
            return None
        self.tally.http(surface, label, response.status_code)
        if response.status_code >= 500:
            request = response.request
            body = request.body if isinstance(request.body, bytes) else str(request.body or "").encode()
            self.tally.repro.append(
                f"{request.method} {request.url} Content-Type: {request.headers.get('Content-Type')!r} "
                f"body ({len(body)} bytes): {body[:300]!r} -> {response.status_code} {response.text[:200]}"
            )
        if response.status_code >= 400:
            check_shape(surface, label, response, shape, self.tally)
        return response

    def upload_token(self) -> str:
        answer = self.session.post(
            f"{self.base}/mcp",
            json=paths.upload_token_call(),
            headers={"Authorization": f"Bearer {self.key}", **paths.MCP_ACCEPT},
            timeout=60,
        )
        answer.raise_for_status()
        return paths.token_of(answer.json())


def check_shape(surface: str, label: str, response: Any, shape: str, tally: Tally) -> None:
    """``rest``: {error, message, field}; ``oauth``: RFC 6749 {error, error_description}; ``page``:
    an HTML error page (the front channel of /authorize answers people, not programs)."""
    if shape == "page":
        ok = response.headers.get("content-type", "").startswith("text/html")
    else:
        try:
            body = response.json()
        except ValueError:
            body = None
        if shape == "oauth":
            ok = isinstance(body, dict) and {"error", "error_description"} <= set(body)
        else:
            ok = isinstance(body, dict) and set(body) == {"error", "message", "field"}
    if not ok:
        where = f"{surface} {label}"
        tally.unshaped[where] += 1
        tally.unshaped_examples.setdefault(where, f"{response.status_code} {response.text[:160]}")


def upload_request(
    case: dict[str, Any], token: str | None
) -> tuple[str, bytes, dict[str, str], dict[str, str]]:
    """The path, body, headers and query of one drawn upload."""
    file_part = paths.Part("file", case["file"], case["filename"] or "", case["part_type"])
    if case["filename"] is None:
        file_part = paths.Part("file", case["file"], None, case["part_type"])
    fields = [paths.Part(k, v.encode("utf-8", "surrogatepass")) for k, v in case["fields"].items()]
    files = [file_part, file_part] if case["two_files"] else [file_part]
    token_parts = (
        []
        if token is None or case["route"] != "uploads-form"
        else [paths.Part("uploadToken", token.encode())]
    )
    parts = fields + (files + token_parts if case["token_after_file"] else token_parts + files)
    body, content_type = paths.multipart(parts, close=case["ending"] != "no closing boundary")
    if case["ending"] == "cut in the file":
        body = body[: body.index(case["file"]) + len(case["file"]) // 2] if case["file"] else body[:-10]
    path = {"documents": "/v1/documents", "uploads-form": "/v1/uploads"}.get(case["route"], "")
    if case["route"] == "uploads-url":
        path = f"/v1/uploads/{quote(token or '', safe='')}" if token else "/v1/uploads/"
    return path, body, {"Content-Type": content_type}, dict(case["query"])


def fuzz_uploads(sender: Sender, examples: int) -> None:
    # Every hostile name once, as the file name and as the title (drawn cases may miss one).
    for name in HOSTILE_NAMES:
        text_file = f"Upload named {name[:40]!r}.".encode()
        for filename, title in ((name, None), ("note.txt", name)):
            fields = (
                [paths.Part("title", title.encode("utf-8", "surrogatepass"))] if title is not None else []
            )
            body, ct = paths.multipart([*fields, paths.Part("file", text_file, filename, "text/plain")])
            headers = {"Authorization": f"Bearer {sender.key}", "Content-Type": ct}
            label = "POST /v1/documents (hostile " + ("file name)" if title is None else "title)")
            sender.send("upload", label, "POST", "/v1/documents", data=body, headers=headers)

    @fuzz_settings(examples)
    @given(case=UPLOAD_CASE, content_type=st.data())
    def run(case: dict[str, Any], content_type: st.DataObject) -> None:
        token: str | None = None
        if case["token"] == "valid":
            token = sender.upload_token()
        elif case["token"] == "bogus":
            token = "mmu_" + "A" * 43
        elif case["token"] == "empty":
            token = ""
        elif case["token"] == "hostile":
            token = content_type.draw(hostile_field())
        path, body, headers, query = upload_request(case, token)
        headers["Content-Type"] = content_type.draw(request_type(headers["Content-Type"]))
        if case["route"] == "documents" or case["with_key"]:
            headers["Authorization"] = f"Bearer {sender.key}"
        label = f"POST /v1/{case['route']} ({case['ending']})"
        sender.send("upload", label, "POST", path, data=body, headers=headers, params=query)

    run()


IMPORT_FORMATS = ["jsonl", "chatgpt", "claude", "mem0", "memory-json", "markdown"]


def zip_of(members: list[tuple[str, bytes]], symlink: str | None = None) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            archive.writestr(name, data)
        if symlink is not None:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, "/etc/passwd")
    return out.getvalue()


def import_bodies() -> list[tuple[str, bytes]]:
    """Hostile import files by name: what they try, and the bytes."""
    conversations = json.dumps([{"title": "t", "mapping": {}, "current_node": None}]).encode()
    line = json.dumps({"type": "memory", "id": "m1", "content": "The fuzz import note."}).encode()
    return [
        ("bad JSON", b'{"type": "memory", "id": '),
        ("not UTF-8", b"\xff\xfe\x00b\x00a\x00d"),
        ("deep nesting", b"[" * 100_000),
        ("deep objects", b'{"a":' * 50_000),
        ("JSON of the wrong shape", b'{"memories": 5, "mapping": [1, 2]}'),
        ("JSON null", b"null"),
        ("empty", b""),
        ("huge line", b"a" * (3 * 1024 * 1024)),
        (
            "huge JSON line",
            json.dumps({"type": "memory", "id": "h", "content": "x" * (2 * 1024 * 1024)}).encode(),
        ),
        (
            "many lines",
            b"\n".join(
                json.dumps({"type": "memory", "id": f"l{n}", "content": f"fuzz import line {n}"}).encode()
                for n in range(2000)
            ),
        ),
        ("NUL in a line", b'{"type": "memory", "id": "n", "content": "a\\u0000b"}\n'),
        ("zip with ../ member", zip_of([("../../conversations.json", conversations), ("../x.md", b"# x")])),
        ("zip with absolute member", zip_of([("/etc/conversations.json", conversations)])),
        (
            "zip with drive letter",
            zip_of([("C:\\conversations.json", conversations), ("C:/memory.json", b"{}")]),
        ),
        ("zip with symlink member", zip_of([("notes/a.md", b"# a")], symlink="notes/link.md")),
        ("zip with NUL in a name", zip_of([("conv\x00ersations.json", conversations)])),
        ("zip bomb", zip_of([("conversations.json", b" " * (200 * 1024 * 1024))])),
        ("zip in a zip", zip_of([("inner.zip", zip_of([("conversations.json", conversations)]))])),
        ("truncated zip", zip_of([("conversations.json", conversations)])[:60]),
        ("zip of hidden files", zip_of([(".obsidian/a.md", b"# a"), (".git/config", b"x")])),
        (
            "memory.json entities",
            b'{"type": "entity", "name": "\\u0000", "entityType": 5, "observations": "x"}\n',
        ),
        ("mem0 list of wrong things", b'[1, "a", null, {"memory": 5}, {"memory": "' + b"m" * 20000 + b'"}]'),
        ("markdown with credentials", ("# Keys\n\n" + "\n".join(CREDENTIALS)).encode()),
        ("a valid line", line),
    ]


IMPORT_BODIES = import_bodies()
IMPORT_CASE = st.fixed_dictionaries(
    {
        "format": weighted(
            (8, st.sampled_from(IMPORT_FORMATS)),
            (1, st.sampled_from(["", "csv", "JSONL", "chatgpt\x00", "../jsonl", "a" * 300])),
        ),
        "body": weighted(
            (5, st.sampled_from(IMPORT_BODIES)),
            (1, st.binary(max_size=256).map(lambda b: ("random bytes", b))),
        ),
        "filename": hostile_name(),
        "dry_run": st.booleans(),
        "space": weighted(
            (8, st.just("default")), (1, st.sampled_from(["nope", "a" * 200, "de fault", "%00"]))
        ),
        "ending": st.sampled_from(["closed", "closed", "closed", "no closing boundary"]),
    }
)


def fuzz_import(sender: Sender, curator: str, examples: int) -> None:
    # Every hostile file name once with a valid file (drawn cases may miss one).
    line = json.dumps({"type": "memory", "id": "named", "content": "The fuzz import note."}).encode()
    for name in HOSTILE_NAMES:
        body, ct = paths.multipart([paths.Part("file", line, name)])
        sender.send(
            "import",
            "POST /v1/spaces/{key}/import (hostile file name)",
            "POST",
            "/v1/spaces/default/import",
            data=body,
            headers={"Authorization": f"Bearer {curator}", "Content-Type": ct},
            params={"from": "jsonl"},
        )

    @fuzz_settings(examples)
    @given(case=IMPORT_CASE, content_type=st.data())
    def run(case: dict[str, Any], content_type: st.DataObject) -> None:
        name, data = case["body"]
        part = paths.Part("file", data, case["filename"])
        body, ct = paths.multipart([part], close=case["ending"] == "closed")
        headers = {"Authorization": f"Bearer {curator}", "Content-Type": content_type.draw(request_type(ct))}
        params = {"from": case["format"], "dryRun": str(case["dry_run"]).lower()}
        sender.send(
            "import",
            f"POST /v1/spaces/{{key}}/import ({name})",
            "POST",
            f"/v1/spaces/{quote(case['space'], safe='')}/import",
            data=body,
            headers=headers,
            params=params,
        )

    run()


def fuzz_bombs(sender: Sender, server_pid: int, wait_s: float = 180.0) -> dict[str, Any]:
    """Upload the decompression bombs of bench/upload_bombs.py and wait for the worker to finish
    with them, sampling the server's RSS (and that of its non-PostgreSQL children) meanwhile."""
    docx_type = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    bombs = [
        ("PNG 12,500 x 12,500", "scan.png", "image/png", upload_bombs.png_bomb()),
        (".docx, document.dat inflating to 1 GiB", "plan.docx", docx_type, upload_bombs.docx_bomb()),
    ]
    samples: list[tuple[int, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(paths.tree_rss(server_pid))
            stop.wait(0.05)

    before = paths.tree_rss(server_pid)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    outcomes: dict[str, str] = {}
    try:
        pending: dict[str, str] = {}
        for label, filename, media_type, data in bombs:
            body, ct = paths.multipart([paths.Part("file", data, filename, media_type)])
            headers = {"Authorization": f"Bearer {sender.key}", "Content-Type": ct}
            answer = sender.send(
                "bomb", f"POST /v1/documents ({label})", "POST", "/v1/documents", data=body, headers=headers
            )
            if answer is None or answer.status_code not in (200, 202):
                outcomes[label] = f"refused at upload: {getattr(answer, 'status_code', 'no answer')}"
                continue
            pending[label] = answer.json()["id"]
        deadline = time.monotonic() + wait_s
        while pending and time.monotonic() < deadline:
            for label, doc_id in list(pending.items()):
                got = sender.send(
                    "bomb",
                    "GET /v1/documents/{id}",
                    "GET",
                    f"/v1/documents/{doc_id}",
                    headers={"Authorization": f"Bearer {sender.key}"},
                )
                status = got.json().get("status") if got is not None and got.status_code == 200 else None
                if status in ("done", "failed"):
                    error = str(got.json().get("error") or "") if got is not None else ""
                    outcomes[label] = f"{status}{': ' + error[:100] if error else ''}"
                    del pending[label]
            time.sleep(0.5)
        for label in pending:
            outcomes[label] = f"not finished within {wait_s:.0f} s"
    finally:
        stop.set()
        sampler.join()
    after = paths.tree_rss(server_pid)
    return {
        "before": before[0],
        "after": after[0],
        "peak": max((s[0] for s in samples), default=0),
        "children_peak": max((s[1] for s in samples), default=0),
        "outcomes": outcomes,
    }


REDIRECTS = [
    REDIRECT,
    "http://127.0.0.1:9/other",
    "https://evil.example/callback",
    "javascript:alert(1)",
    "http://127.0.0.1:9/callback#frag",
    "http://127.0.0.1:9/callback?x=1&x=2",
    "http://user:pass@127.0.0.1:9/callback",
    "http://[::1]:9/callback",
    "http://127.0.0.1:9/" + "a" * 5000,
    "http://127.0.0.1:9/\x00",
    "data:text/html,hi",
    "//127.0.0.1:9/callback",
    "",
]
CIMD_IDS = [
    "https://127.0.0.1/client.json",
    "https://localhost:1/client.json",
    "https://[::1]/client.json",
    "https://10.0.0.1/client.json",
    "https://169.254.169.254/latest/meta-data",
    "https://invalid.invalid/client.json",
    "https://example.com:99999/client.json",
    "https://user:pass@127.0.0.1/client.json",
    "https://exa\x00mple.com/client.json",
    "http://example.com/client.json",
    "https://" + "a" * 3000 + ".com/",
    "https://0x7f000001/client.json",
    "https://2130706433/client.json",
]


def client_ids(registered: str) -> st.SearchStrategy[str]:
    return weighted(
        (4, st.just(registered)),
        (3, st.sampled_from(CIMD_IDS)),
        (1, st.sampled_from(["", "unknown", registered + "x", registered.upper()])),
        (1, text(200)),
    )


def oauth_params(registered: str) -> st.SearchStrategy[list[tuple[str, str]]]:
    """An /authorize request: every field mostly right, sometimes wrong, absent or repeated."""
    _, challenge = pkce()
    fields: dict[str, st.SearchStrategy[Any]] = {
        "response_type": weighted((6, st.just("code")), (1, st.sampled_from(["token", "", "code code"]))),
        "client_id": client_ids(registered),
        "redirect_uri": st.sampled_from(REDIRECTS),
        "state": weighted((4, st.just("st-1")), (1, text(1200))),
        "code_challenge": weighted(
            (5, st.just(challenge)),
            (1, st.sampled_from(["short", "a" * 129, "!" * 43, challenge + "="])),
            (1, text(200)),
        ),
        "code_challenge_method": weighted((5, st.just("S256")), (1, st.sampled_from(["plain", "s256", ""]))),
        "resource": st.sampled_from(["", "http://127.0.0.1:1/mcp", "https://evil.example/mcp"]),
        "scope": st.sampled_from(["memory", "", "admin memory"]),
    }
    return st.fixed_dictionaries({k: maybe_field(v) for k, v in fields.items()}).flatmap(
        lambda d: st.lists(st.sampled_from(sorted(d)), max_size=2).map(
            lambda repeat: (
                [(k, v) for k, v in d.items() if v is not None] + [(k, d[k]) for k in repeat if d[k]]
            )
        )
    )


def maybe_field(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return weighted((8, strategy), (1, st.none()))


def token_form(registered: str) -> st.SearchStrategy[list[tuple[str, str]]]:
    verifier, _ = pkce()
    fields: dict[str, st.SearchStrategy[Any]] = {
        "grant_type": weighted(
            (5, st.sampled_from(["authorization_code", "refresh_token"])),
            (1, st.sampled_from(["client_credentials", "password", "", "authorization_code\x00"])),
        ),
        "client_id": client_ids(registered),
        "code": weighted((3, st.sampled_from(["bogus", "a" * 5000, ""])), (1, text(100))),
        "redirect_uri": st.sampled_from(REDIRECTS),
        "code_verifier": weighted((3, st.just(verifier)), (1, st.sampled_from(["", "a" * 200, "short"]))),
        "refresh_token": weighted((3, st.sampled_from(["mmr_bogus", "x" * 5000])), (1, text(100))),
        "resource": st.sampled_from(["", "http://127.0.0.1:1/mcp", "https://evil.example/"]),
    }
    return st.fixed_dictionaries({k: maybe_field(v) for k, v in fields.items()}).flatmap(
        lambda d: st.lists(st.sampled_from(sorted(d)), max_size=2).map(
            lambda repeat: (
                [(k, v) for k, v in d.items() if v is not None] + [(k, d[k]) for k in repeat if d[k]]
            )
        )
    )


REGISTER_BODIES = st.one_of(
    st.fixed_dictionaries(
        {
            "redirect_uris": weighted(
                (4, st.lists(st.sampled_from(REDIRECTS), min_size=1, max_size=3)),
                (1, st.lists(st.just(REDIRECT), min_size=30, max_size=60)),
                (1, WRONG),
            ),
            "client_name": maybe(weighted((3, text(300)), (1, st.sampled_from(CREDENTIALS)))),
            "grant_types": maybe(
                st.lists(st.sampled_from(["authorization_code", "refresh_token", "implicit", ""]), max_size=3)
            ),
            "response_types": maybe(st.lists(st.sampled_from(["code", "token"]), max_size=2)),
            "token_endpoint_auth_method": maybe(st.sampled_from(["none", "client_secret_basic"])),
        }
    ).map(lambda d: json.dumps({k: v for k, v in d.items() if v is not None}).encode()),
    st.sampled_from(
        [
            b"",
            b"{",
            b"[]",
            b"null",
            b'{"redirect_uris": ["' + REDIRECT.encode() + b'"], "logo_uri": "' + b"x" * 20000 + b'"}',
            b'{"redirect_uris": ["\\ud800"]}',
            b"[" * 50_000,
        ]
    ),
)


def fuzz_oauth(sender: Sender, examples: int) -> None:
    for path in (
        "/.well-known/oauth-authorization-server",
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/jwks.json",
    ):
        sender.send("oauth", f"GET {path}", "GET", path, shape="oauth")
    registered = sender.session.post(
        f"{sender.base}/register",
        json={"client_name": "Fuzz app", "redirect_uris": [REDIRECT]},
        timeout=30,
    ).json()["client_id"]

    @fuzz_settings(examples)
    @given(body=REGISTER_BODIES, content_type=st.sampled_from(["application/json", "text/plain", ""]))
    def register(body: bytes, content_type: str) -> None:
        sender.send(
            "oauth",
            "POST /register",
            "POST",
            "/register",
            shape="oauth",
            data=body,
            headers={"Content-Type": content_type},
        )

    @fuzz_settings(examples)
    @given(params=oauth_params(registered))
    def authorize(params: list[tuple[str, str]]) -> None:
        sender.send("oauth", "GET /authorize", "GET", "/authorize", shape="page", params=params)

    @fuzz_settings(examples)
    @given(
        params=oauth_params(registered),
        step=st.sampled_from(["/authorize", "/authorize/consent"]),
        csrf=st.sampled_from(["matching", "missing", "other"]),
        extra=st.lists(
            st.tuples(st.sampled_from(["api_key", "sign_in", "decision", "space"]), hostile_field()),
            max_size=3,
        ),
    )
    def sign_in(params: list[tuple[str, str]], step: str, csrf: str, extra: list[tuple[str, str]]) -> None:
        token = "c" * 32
        form = [*params, *extra]
        cookies = {}
        if csrf != "missing":
            form.append(("csrf", token))
            cookies = {"memory_mcp_oauth_csrf": token if csrf == "matching" else "other"}
        if step == "/authorize" and not any(k == "api_key" for k, _ in extra):
            form.append(("api_key", sender.key))
        sender.send("oauth", f"POST {step}", "POST", step, shape="page", data=form, cookies=cookies)

    @fuzz_settings(examples)
    @given(form=token_form(registered), content_type=st.sampled_from(["form", "form", "json", "none"]))
    def token(form: list[tuple[str, str]], content_type: str) -> None:
        if content_type == "json":
            sender.send("oauth", "POST /token", "POST", "/token", shape="oauth", json=dict(form))
        elif content_type == "none":
            sender.send(
                "oauth",
                "POST /token",
                "POST",
                "/token",
                shape="oauth",
                data=b"grant_type=x",
                headers={"Content-Type": ""},
            )
        else:
            sender.send("oauth", "POST /token", "POST", "/token", shape="oauth", data=form)

    @fuzz_settings(examples)
    @given(
        form=st.lists(
            st.tuples(st.sampled_from(["token", "token_type_hint", "client_id"]), hostile_field()), max_size=3
        )
    )
    def revoke(form: list[tuple[str, str]]) -> None:
        sender.send("oauth", "POST /revoke", "POST", "/revoke", shape="oauth", data=form)

    for run in (register, authorize, sign_in, token, revoke):
        run()
    asyncio.run(oauth_wrong_steps(sender))


async def oauth_wrong_steps(sender: Sender) -> None:
    """A real code and refresh token used wrongly: a bad PKCE verifier, another redirect URI, the
    code twice, a refresh token of another client, a revoked refresh token."""
    async with httpx2.AsyncClient(base_url=sender.base, timeout=60) as http:
        app, other = Flow(http), Flow(http)
        await app.register(client_name="Fuzz PKCE app")
        await other.register(client_name="Fuzz other app")

        def tally(label: str, response: httpx2.Response) -> None:
            sender.tally.http("oauth", label, response.status_code)
            if response.status_code >= 400:
                check_shape("oauth", label, response, "oauth", sender.tally)

        code = await app.code(sender.key)
        wrong = app.verifier[:-1] + "x"
        tally("POST /token (wrong PKCE verifier)", await app.exchange(code, code_verifier=wrong))
        tally("POST /token (code after a failed PKCE)", await app.exchange(code))
        code = await app.code(sender.key)
        other_uri = "http://127.0.0.1:9/other"
        tally("POST /token (another redirect_uri)", await app.exchange(code, redirect_uri=other_uri))
        code = await app.code(sender.key)
        first = await app.exchange(code)
        tally("POST /token (code)", first)
        tally("POST /token (the code again)", await app.exchange(code))
        refresh = first.json().get("refresh_token", "") if first.status_code == 200 else ""
        tally("POST /token (refresh by another client)", await other.refresh(refresh))
        tally("POST /revoke (refresh token)", await http.post("/revoke", data={"token": refresh}))
        tally("POST /token (revoked refresh token)", await app.refresh(refresh))


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hostile_bearers(kid: str, real: str) -> list[tuple[str, str]]:
    """Bearer tokens by what they try: forgeries that name this server's signing key (a signature
    that is not ours, another issuer, a payload that is not JSON), headers and payloads nested past
    any parser, the real token cut or changed, and strings that are no token at all."""
    ours = {"alg": "EdDSA", "kid": kid, "typ": "at+jwt"}
    claims = json.loads(base64.urlsafe_b64decode(real.split(".")[1] + "=="))
    sig = b64url(b"\x00" * 64)

    def jwt_of(header: bytes, payload: bytes, signature: str = sig) -> str:
        return ".".join([b64url(header), b64url(payload), signature])

    head = json.dumps(ours).encode()
    return [
        ("our kid, not our signature", jwt_of(head, json.dumps(claims).encode())),
        (
            "our kid, another issuer",
            jwt_of(head, json.dumps({**claims, "iss": "https://x.example/"}).encode()),
        ),
        ("our kid, payload not JSON", jwt_of(head, b"not json")),
        ("our kid, payload nested", jwt_of(head, b"[" * 5000 + b"]" * 5000)),
        ("header nested 2 KB", jwt_of(b"[" * 1000 + b"]" * 1000, b"{}")),
        ("header nested in kid", jwt_of(b'{"kid":' + b"[" * 700 + b"]" * 700 + b"}", b"{}")),
        ("alg none", jwt_of(json.dumps({**ours, "alg": "none"}).encode(), json.dumps(claims).encode(), "")),
        (
            "HS256 with our kid",
            jwt_of(json.dumps({**ours, "alg": "HS256"}).encode(), json.dumps(claims).encode()),
        ),
        ("real token cut", real[:-10]),
        ("real token, last byte changed", real[:-1] + ("A" if real[-1] != "A" else "B")),
        ("real token, spaces list of objects", jwt_of(head, json.dumps({**claims, "spaces": [{}]}).encode())),
        ("header not base64", "%%%." + real.split(".", 1)[1]),
        ("two dots only", ".."),
        ("refresh-shaped", "mmr_" + "x" * 43),
        ("key-shaped", "mmk_0123456789_" + "y" * 40),
        ("long junk", "z" * 8000),
    ]


def flood_requests(
    kid: str, real: str, client_id: str, curator: str, rng: random.Random
) -> Callable[[], tuple[str, str, str, str, dict[str, Any]]]:
    """A maker of hostile requests to the auth and import paths: (surface, label, method, path,
    keyword arguments of ``Sender.send``), drawn with ``rng``."""
    bearers = hostile_bearers(kid, real)
    imports = [(n, b) for n, b in IMPORT_BODIES if len(b) < 256 * 1024 and n != "many lines"]
    forms = ["grant_type", "code", "refresh_token", "client_id", "redirect_uri", "code_verifier", "resource"]

    def junk() -> str:
        return rng.choice([*NASTY[:12], client_id, REDIRECT, "S256", "refresh_token", "authorization_code"])

    def make() -> tuple[str, str, str, str, dict[str, Any]]:
        name, bearer = rng.choice(bearers)
        auth = {"Authorization": f"Bearer {bearer}"}
        pick = rng.randrange(100)
        if pick < 25:
            return "flood", f"GET /v1 ({name})", "GET", "/v1/whoami", {"headers": auth}
        if pick < 45:
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            return (
                "flood",
                f"POST /mcp ({name})",
                "POST",
                "/mcp",
                {"json": call, "headers": {**auth, **paths.MCP_ACCEPT}},
            )
        if pick < 65:
            return (
                "flood",
                f"POST /revoke ({name})",
                "POST",
                "/revoke",
                {"data": {"token": bearer}, "shape": "oauth"},
            )
        if pick < 80:
            form = {f: junk() for f in rng.sample(forms, rng.randint(1, len(forms)))}
            if rng.random() < 0.5:
                form["refresh_token"] = bearer
            return "flood", "POST /token", "POST", "/token", {"data": form, "shape": "oauth"}
        if pick < 88:
            params = {
                f: junk() for f in rng.sample(["client_id", "redirect_uri", "state", "code_challenge"], 3)
            }
            return "flood", "GET /authorize", "GET", "/authorize", {"params": params, "shape": "page"}
        if pick < 94:
            body = rng.choice([b"[" * 4000, b"{}", b"null", json.dumps({"redirect_uris": [junk()]}).encode()])
            return (
                "flood",
                "POST /register",
                "POST",
                "/register",
                {"data": body, "shape": "oauth", "headers": {"Content-Type": "application/json"}},
            )
        what, body = rng.choice(imports)
        fmt = rng.choice(IMPORT_FORMATS)
        return (
            "flood",
            f"POST import ({what})",
            "POST",
            f"/v1/spaces/default/import?from={fmt}&dryRun=true",
            {"files": {"file": ("export", body)}, "headers": {"Authorization": f"Bearer {curator}"}},
        )

    return make


def fuzz_flood(sender: Sender, curator: str, count: int, workers: int = 8) -> float:
    """``count`` hostile requests to the auth and import paths from ``workers`` threads; their rate."""
    asyncio.run(race_refreshes(sender))
    token, client_id = asyncio.run(real_token(sender))
    kid = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))["kid"]
    started = time.monotonic()
    per_worker = [count // workers + (1 if n < count % workers else 0) for n in range(workers)]

    def work(n: int, todo: int) -> None:
        own = Sender(sender.base, sender.key, sender.tally)
        make = flood_requests(kid, token, client_id, curator, random.Random(n))
        for _ in range(todo):
            surface, label, method, path, kw = make()
            own.send(surface, label, method, path, **kw)

    threads = [threading.Thread(target=work, args=(n, todo)) for n, todo in enumerate(per_worker)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return count / (time.monotonic() - started)


async def real_token(sender: Sender) -> tuple[str, str]:
    """An access token of a registered app (for its key id and claims), and the app's client id."""
    async with httpx2.AsyncClient(base_url=sender.base, timeout=60) as http:
        app = Flow(http)
        await app.register(client_name="Fuzz flood app")
        tokens = await app.tokens(sender.key)
        return tokens["access_token"], app.client_id


async def race_refreshes(sender: Sender, trials: int = 8) -> None:
    """One refresh token presented twice at once: the loser is refused and the grant revoked (a 5xx
    or a winner whose tokens still work is a failure)."""
    async with httpx2.AsyncClient(base_url=sender.base, timeout=60) as http:
        app = Flow(http)
        await app.register(client_name="Fuzz race app")
        for _ in range(trials):
            tokens = await app.tokens(sender.key)
            answers = await asyncio.gather(
                app.refresh(tokens["refresh_token"]), app.refresh(tokens["refresh_token"])
            )
            for answer in answers:
                sender.tally.http("oauth", "POST /token (refresh race)", answer.status_code)
            won = [a for a in answers if a.status_code == 200]
            if won:
                later = await app.refresh(won[0].json()["refresh_token"])
                sender.tally.http("oauth", "POST /token (after the race)", later.status_code)
                if later.status_code == 200:
                    sender.tally.server_errors.append("oauth refresh race: the grant stayed live")


SURFACES = ("rest", "mcp", "upload", "import", "oauth", "bomb", "flood")


def check_log(path: Path) -> tuple[int, list[str], list[str]]:
    """Lines the server wrote; its errors (JSON, level error); lines neither JSON nor start-up text."""
    lines = path.read_text(errors="replace").splitlines()
    errors, stray = [], []
    for line in lines:
        # A progress bar the model loader draws on stderr (no newline) may run into the next entry.
        start = line.find('{"ts": ')
        try:
            entry = json.loads(line[max(start, 0) :])
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


def report(
    tally: Tally,
    log_lines: int,
    errors: list[str],
    stray: list[str],
    seconds: float,
    bombs: dict[str, Any] | None = None,
) -> int:
    total = sum(tally.calls.values())
    per_surface = ", ".join(f"{k} {v}" for k, v in sorted(tally.calls.items()))
    print(f"\ncalls: {total} in {seconds:.0f} s ({per_surface})")
    for surface in sorted(tally.calls):
        classes = {c: n for (s, c), n in tally.statuses.items() if s == surface}
        print(f"  {surface:8} " + "  ".join(f"{c // 100}xx: {n}" for c, n in sorted(classes.items())))
    if bombs is not None:
        mib = 1024 * 1024
        print(
            f"bombs: server RSS {bombs['before'] / mib:.0f} MiB before, {bombs['after'] / mib:.0f} MiB after, "
            f"peak {bombs['peak'] / mib:.0f} MiB (its other children: peak {bombs['children_peak'] / mib:.0f} MiB)"
        )
        for label, outcome in bombs["outcomes"].items():
            print(f"  {label}: {outcome}")
    print(f"5xx answers or unhandled tool exceptions: {len(tally.server_errors)}")
    for line, count in Counter(tally.server_errors).most_common(20):
        print(f"  {count:4} x {line}")
    for line in tally.repro[:5]:
        print(f"  to reproduce: {line}")
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
            # /register is rate-limited per address (20 an hour): the fuzzer must get past it, and a
            # client id that is a metadata URL waits at most this long for a host that never answers.
            "MEMORY_MCP_OAUTH_REGISTRATIONS_PER_HOUR": "1000000",
            "MEMORY_MCP_OAUTH_CIMD_TIMEOUT_S": "2",
            # Past the failure budget every refusal is a 429 from the throttle: raised, so that the
            # flood's hostile tokens reach the code that reads them.
            "MEMORY_MCP_AUTH_FAILURE_LIMIT": "1000000000",
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
    parser.add_argument(
        "--requests",
        type=int,
        default=10_000,
        help="hostile requests of the flood surface (auth and import paths; the target is 100,000)",
    )
    parser.add_argument(
        "--surfaces",
        default=",".join(SURFACES),
        help=f"comma-separated subset of {','.join(SURFACES)} (default: all)",
    )
    args = parser.parse_args()
    surfaces = [s for s in args.surfaces.split(",") if s]
    if not set(surfaces) <= set(SURFACES):
        parser.error(f"--surfaces takes {', '.join(SURFACES)}")
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
        sender = Sender(base, key, tally)
        bombs = None
        if "rest" in surfaces:
            fuzz_rest(base, key, args.examples, tally)
        if "mcp" in surfaces:
            asyncio.run(fuzz_mcp(base, key, args.examples, tally))
        if "upload" in surfaces:
            fuzz_uploads(sender, args.examples)
        if "import" in surfaces:
            fuzz_import(sender, paths.curate_key(data_dir), args.examples)
        if "oauth" in surfaces:
            fuzz_oauth(sender, args.examples)
        if "bomb" in surfaces:
            bombs = fuzz_bombs(sender, server.pid)
        if "flood" in surfaces:
            rate = fuzz_flood(sender, paths.curate_key(data_dir), args.requests)
            print(f"flood: {args.requests} hostile requests at {rate:.0f} a second")
        elapsed = time.monotonic() - started
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        code = report(tally, *check_log(log), elapsed, bombs)
    finally:
        if server.poll() is None:
            server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)
        log.unlink(missing_ok=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
