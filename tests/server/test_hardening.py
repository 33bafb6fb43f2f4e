"""Bad input, oversized bodies, unknown routes and failed keys: never a 5xx, always one JSON shape."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, cast

import httpx2
import psycopg
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memory_mcp.core.logs import JsonFormatter, TextFormatter
from memory_mcp.embedder.client import Embedder
from memory_mcp.store import validation
from memory_mcp.store.embedded import APP_ROLE
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer, run_server

MARKER = "the-harbour-gate-code-is-4417"  # memory text that must never come back or reach a log line


class CountingEmbedder:
    """The real embedder, counting how often the server asked it for vectors."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def embed(self, texts: Sequence[str], *, timeout_s: float | None = None) -> Any:
        self.calls += 1
        return await self.inner.embed(list(texts), timeout_s=timeout_s)

    async def embed_query(self, text: str) -> Any:
        self.calls += 1
        return await self.inner.embed_query(text)


class Capture(logging.Handler):
    def __init__(self, formatter: logging.Formatter) -> None:
        super().__init__()
        self.setFormatter(formatter)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def capture_root(formatter: logging.Formatter) -> Iterator[list[str]]:
    """Every line the server logs meanwhile (it runs in this process), as ``formatter`` writes it."""
    capture = Capture(formatter)
    root = logging.getLogger()
    level = root.level
    root.addHandler(capture)
    root.setLevel(logging.INFO)
    yield capture.lines
    root.removeHandler(capture)
    root.setLevel(level)


@pytest.fixture
def log_lines() -> Iterator[list[str]]:
    yield from capture_root(JsonFormatter())


@pytest.fixture
def text_log_lines() -> Iterator[list[str]]:
    yield from capture_root(TextFormatter())


@pytest.fixture
async def counted(
    db_urls: tuple[str, str], embedder: Embedder
) -> AsyncIterator[tuple[RunningServer, CountingEmbedder]]:
    counting = CountingEmbedder(embedder)
    async with run_server(db_urls[0], cast(Embedder, counting)) as running:
        yield running, counting


async def writer_key(server: RunningServer) -> str:
    space = await make_space(server.db)
    return await make_key(server.db, await make_user(server.db), {space: "ReadWrite"}, space)


def error_of(response: httpx2.Response, status: int, field: str | None = None) -> dict[str, Any]:
    """The body of an error response, checked for the one shape every REST error has."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    assert set(body) == {"error", "message", "field"}, body
    assert isinstance(body["error"], str) and body["error"] and isinstance(body["message"], str)
    assert body["field"] == field, body
    return body


async def test_text_that_cannot_be_stored_is_a_422_naming_the_field(
    counted: tuple[RunningServer, CountingEmbedder],
) -> None:
    server, embedder = counted
    key = await writer_key(server)
    async with httpx2.AsyncClient(base_url=server.base, headers={"Authorization": f"Bearer {key}"}) as http:

        async def post_raw(path: str, body: bytes) -> httpx2.Response:
            return await http.post(path, content=body, headers={"Content-Type": "application/json"})

        cases: list[tuple[httpx2.Response, str, str]] = [
            (await http.post("/v1/memories", json={"content": f"{MARKER}\x00"}), "content", "NUL"),
            (await http.post("/v1/memories/forget", json={"content": f"\x00{MARKER}"}), "content", "NUL"),
            (await http.get("/v1/search", params={"query": f"{MARKER}\x00"}), "query", "NUL"),
            (await http.get("/v1/search", params={"keyword": f"\x00{MARKER}"}), "keyword", "NUL"),
            (await http.get("/v1/search", params={"category": "a\x00"}), "category", "NUL"),
            (await http.get("/v1/memories", params={"containerTag": "a\x00"}), "containerTag", "NUL"),
            (await http.post("/v1/memories", json={"content": f"{MARKER}\x07"}), "content", "control"),
            # A JSON escape of a lone surrogate, and the same code point as raw CESU-8 bytes.
            (
                await post_raw("/v1/memories", b'{"content": "' + MARKER.encode() + b'\\ud800"}'),
                "content",
                "Unicode",
            ),
            (
                await post_raw("/v1/memories", b'{"content": "' + MARKER.encode() + b'\xed\xa0\x80"}'),
                "content",
                "Unicode",
            ),
            (await post_raw("/v1/memories/forget", b'{"content": "\\udfff"}'), "content", "Unicode"),
            (
                await post_raw("/v1/memories", b'{"content": "x", "category": "\\ud800"}'),
                "category",
                "Unicode",
            ),
            (
                await http.post("/v1/memories", json={"content": "\u200b\u2060\ufeff \u3164"}),
                "content",
                "visible",
            ),
            (
                await http.post("/v1/memories", json={"content": "x" * (validation.MAX_DOCUMENT_TEXT + 1)}),
                "content",
                "at most 100000",
            ),
            (
                await http.get("/v1/search", params={"query": "q" * (validation.MAX_QUERY + 1)}),
                "query",
                "at most",
            ),
            (
                await http.get("/v1/search", params={"keyword": "k" * (validation.MAX_KEYWORD + 1)}),
                "keyword",
                "at most",
            ),
            (await http.get("/v1/memories", params={"page": 2**62}), "page", "at most 1000000"),
            (await http.get("/v1/documents", params={"page": 2**62}), "page", "at most 1000000"),
            (await http.get("/v1/memories", params={"page": "9" * 5000}), "page", "integer"),
            (await http.get("/v1/memories", params={"limit": 0}), "limit", "at least 1"),
            (await post_raw("/v1/memories", b'{"content": '), "body", "valid JSON"),
            (await http.post("/v1/memories", json={"category": "x"}), "content", "is required"),
            (await http.post("/v1/memories", json=["not", "an", "object"]), "body", "JSON object"),
            (await http.put("/v1/spaces/active", json={"space": "s\x00"}), "space", "NUL"),
        ]
        for response, field, words in cases:
            body = error_of(response, 422, field)
            assert body["error"] == "ValidationError" and body["message"].startswith(f"{field}: ")
            assert words in body["message"], body
            assert MARKER not in response.text  # the input never comes back
        too_long = cases[12][0].json()
        assert too_long["message"] == "content: must be at most 100000 characters"

        # Bytes that are not UTF-8 at all cannot be read as JSON: a 400, same shape.
        unreadable = await post_raw("/v1/memories", b'{"content": "\xff\xfe"}')
        assert error_of(unreadable, 400)["error"] == "BadRequest"
        bad_id = await http.get("/v1/documents/%00")
        assert error_of(bad_id, 422, "documentId")["message"] == "documentId: must be a UUID"

    # Nothing above was worth a forward pass: every refusal came before the embedder.
    assert embedder.calls == 0
    async with httpx2.AsyncClient(base_url=server.base, headers={"Authorization": f"Bearer {key}"}) as http:
        saved = await http.post("/v1/memories", json={"content": "Tabs\tand\nline breaks are fine."})
        assert (
            saved.status_code == 200
            and saved.json()["memory"]["content"] == "Tabs\tand\nline breaks are fine."
        )
    assert embedder.calls == 1


async def test_framework_statuses_answer_in_the_same_shape(server: RunningServer) -> None:
    async with httpx2.AsyncClient(base_url=server.base) as http:
        for path in ("/nope", "/v1/nope", "/v1/memories/a/b", "/mcp-not"):
            assert error_of(await http.get(path), 404)["error"] == "NotFound"
        wrong_method = await http.delete("/v1/whoami")
        assert error_of(wrong_method, 405)["error"] == "MethodNotAllowed"
        assert wrong_method.headers["allow"] == "GET"
        assert error_of(await http.post("/v1/search"), 405)["message"].endswith("allowed: GET")
        assert error_of(await http.put("/healthz"), 405)["error"] == "MethodNotAllowed"
        missing_key = await http.get("/v1/whoami")
        assert error_of(missing_key, 401)["error"] == "AuthenticationFailed"
        assert missing_key.headers["www-authenticate"].startswith("Bearer")
        # Everything the API documents is still reachable, MCP included.
        assert (await http.get("/openapi.json")).status_code == 200
        assert (await http.get("/docs")).status_code == 200
        assert (await http.post("/mcp", json={})).status_code == 401


async def test_oversized_bodies_are_refused_unread_on_rest_and_mcp(server: RunningServer) -> None:
    key = await writer_key(server)
    huge = b'{"content": "' + b"x" * (20 * 1024 * 1024) + b'"}'

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(40):  # no Content-Length: the server counts what arrives and stops at 1 MiB
            yield b"y" * 65536

    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    async with httpx2.AsyncClient(base_url=server.base, headers=headers, timeout=30) as http:
        declared = await http.post("/v1/memories", content=huge)
        body = error_of(declared, 413)
        assert body["error"] == "ContentTooLarge" and "1048576 bytes" in body["message"]
        assert len(declared.content) < 200  # nothing of the request echoed back
        streamed = await http.post("/v1/memories", content=chunks())
        assert error_of(streamed, 413)["error"] == "ContentTooLarge"

        mcp_headers = {"Accept": "application/json, text/event-stream"}
        mcp_declared = await http.post("/mcp", content=huge, headers=mcp_headers)
        assert error_of(mcp_declared, 413)["error"] == "ContentTooLarge"
        mcp_streamed = await http.post("/mcp", content=chunks(), headers=mcp_headers)
        assert error_of(mcp_streamed, 413)["error"] == "ContentTooLarge"

        # Bodies under the limit are untouched, and the server carries on.
        fits = await http.post("/v1/memories", json={"content": "A body well under the limit."})
        assert fits.status_code == 200 and fits.json()["status"] == "saved"
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http,
        Client(streamable_http_client(server.mcp_url, http_client=http)) as client,
    ):
        listed = await client.call_tool("listMemories", {})
        assert not listed.is_error and listed.structured_content is not None
        assert listed.structured_content["memories"][0]["content"] == "A body well under the limit."


def from_address(address: str, **kwargs: Any) -> httpx2.AsyncClient:
    """A client whose connections come from ``address`` (any of 127.0.0.0/8 reaches the server)."""
    return httpx2.AsyncClient(
        transport=httpx2.AsyncHTTPTransport(local_address=address), timeout=30, **kwargs
    )


def retry_after(response: httpx2.Response) -> int:
    body = error_of(response, 429)
    assert body["error"] == "TooManyRequests"
    seconds = int(response.headers["retry-after"])
    assert 1 <= seconds <= 600
    return seconds


async def test_failed_keys_are_throttled_while_valid_keys_keep_working(
    db_urls: tuple[str, str], embedder: Embedder, log_lines: list[str]
) -> None:
    async with run_server(db_urls[0], embedder, auth_failure_limit=3, auth_failure_window_s=600) as server:
        key = await writer_key(server)
        prefix = key.split("_")[1]
        bad_keys = [f"mmk_{n:010d}_not-a-secret-{n}" for n in range(10)]

        # One address: three failures are 401s, the next ones 429s, on REST and on MCP alike.
        async with from_address("127.0.0.2", base_url=server.base) as http:
            for bad in bad_keys[:3]:
                failed = await http.get("/v1/whoami", headers={"Authorization": f"Bearer {bad}"})
                error_of(failed, 401)
            retry_after(await http.get("/v1/whoami", headers={"Authorization": f"Bearer {bad_keys[3]}"}))
            # No credential at all is how an OAuth client discovers where to sign in: still a 401
            # with its challenge, and not counted.
            discovery = await http.get("/v1/whoami")
            assert (
                discovery.status_code == 401 and "resource_metadata" in discovery.headers["www-authenticate"]
            )
            retry_after(
                await http.post(
                    "/mcp",
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                    headers={
                        "Authorization": f"Bearer {bad_keys[4]}",
                        "Accept": "application/json, text/event-stream",
                    },
                )
            )
            # A valid key from the same address is served as ever.
            me = await http.get("/v1/whoami", headers={"Authorization": f"Bearer {key}"})
            assert me.status_code == 200 and me.json()["key"]["prefix"] == prefix
        async with (
            from_address("127.0.0.2", headers={"Authorization": f"Bearer {key}"}) as http,
            Client(streamable_http_client(server.mcp_url, http_client=http)) as client,
        ):
            assert not (await client.call_tool("whoAmI", {})).is_error

        # One key prefix guessed at from many addresses: its failures are throttled everywhere,
        # while its owner keeps working and other clients' failures stay plain 401s.
        for n in range(3, 8):
            async with from_address(f"127.0.0.{n}", base_url=server.base) as http:
                guess = await http.get(
                    "/v1/whoami", headers={"Authorization": f"Bearer mmk_{prefix}_guess-{n}"}
                )
                if n < 6:
                    error_of(guess, 401)
                else:
                    retry_after(guess)
        async with from_address("127.0.0.9", base_url=server.base) as http:
            other = await http.get("/v1/whoami", headers={"Authorization": f"Bearer {bad_keys[9]}"})
            error_of(other, 401)
            owner = await http.get("/v1/whoami", headers={"Authorization": f"Bearer {key}"})
            assert owner.status_code == 200

    failures = [e for e in map(json.loads, log_lines) if e["message"].startswith("authentication failed")]
    reasons = {(e["reason"], e["key_prefix"]) for e in failures}
    assert ("unknown_key", "0000000001") in reasons and ("missing_key", None) in reasons
    assert ("wrong_secret", prefix) in reasons
    assert all(e["level"] == "warning" for e in failures)
    throttled = [e for e in map(json.loads, log_lines) if e.get("throttled_by")]
    assert {e["throttled_by"] for e in throttled} == {"address", "key_prefix"}
    text = "\n".join(log_lines)
    assert key not in text and "not-a-secret" not in text and "guess-" not in text


async def test_a_server_fault_is_a_500_without_details_and_its_log_holds_no_data(
    db_urls: tuple[str, str], embedder: Embedder, log_lines: list[str], text_log_lines: list[str]
) -> None:
    async with run_server(db_urls[0], embedder) as server:
        key = await writer_key(server)
        # A real fault under the server: its database role loses the right to write memories.
        owner_url = db_urls[1].replace("+psycopg", "")
        with psycopg.connect(owner_url, autocommit=True) as conn:
            conn.execute(f'REVOKE INSERT ON memories, documents FROM "{APP_ROLE}"')
        async with httpx2.AsyncClient(
            base_url=server.base, headers={"Authorization": f"Bearer {key}"}
        ) as http:
            failed = await http.post("/v1/memories", json={"content": f"Remember {MARKER} for the gate."})
            body = error_of(failed, 500)
            assert body == {"error": "InternalError", "message": "internal error", "field": None}
            assert MARKER not in failed.text and "Traceback" not in failed.text
            # Bad input beside it is still only a 4xx, and the server still answers.
            error_of(await http.post("/v1/memories", json={"content": f"{MARKER}\x00"}), 422, "content")
            assert (await http.get("/v1/whoami")).status_code == 200

    entries = [json.loads(line) for line in log_lines]  # every line is one JSON object
    fault = next(e for e in entries if e["message"].startswith("unhandled "))
    assert fault["level"] == "error"
    assert (
        "InsufficientPrivilege" in fault["message"]
        and "Traceback (most recent call last)" in fault["exception"]
    )
    for text in ("\n".join(log_lines), "\n".join(text_log_lines)):  # JSON, and plain text alike
        assert "InsufficientPrivilege" in text and "Traceback (most recent call last)" in text
        assert MARKER not in text and key not in text
        assert "[parameters:" not in text
