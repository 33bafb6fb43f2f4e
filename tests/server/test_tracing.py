"""Traces: one trace per MCP call, from the HTTP request down to the SQL and the embedder.

The server runs in this process with tracing set up on an in-memory exporter; a real MCP client
calls it over HTTP. Without an endpoint in the environment, nothing of the SDK is even imported.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, format_trace_id
from sqlalchemy import text

from memory_mcp.core import tracing
from memory_mcp.embedder.client import Embedder
from memory_mcp.store.db import Database
from tests.server.conftest import RunningServer, mcp_session, run_server
from tests.server.test_logs import Capture
from tests.server.test_tools import writer_key

SECRET_QUERY = "where do the blue penguins winter"


@dataclass
class Traced:
    server: RunningServer
    spans: InMemorySpanExporter


@pytest.fixture
async def traced(db_urls: tuple[str, str], embedder: Embedder) -> AsyncIterator[Traced]:
    exporter = InMemorySpanExporter()
    assert tracing.setup("memory-mcp-test", exporter)
    try:
        async with run_server(db_urls[0], embedder) as running:
            yield Traced(running, exporter)
    finally:
        tracing.shutdown()


def children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def descendants(spans: list[ReadableSpan], root: ReadableSpan) -> list[ReadableSpan]:
    found = children(spans, root)
    return found + [d for child in found for d in descendants(spans, child)]


async def test_one_trace_covers_mcp_call_search_sql_and_embed(traced: Traced) -> None:
    key = await writer_key(traced.server)
    access = Capture()
    logging.getLogger("memory_mcp.access").addHandler(access)
    logging.getLogger("memory_mcp.access").setLevel(logging.INFO)
    try:
        async with mcp_session(traced.server, key) as session:
            await session.ok("add_memory", content="Blue penguins winter on the southern islands.")
            traced.spans.clear()
            access.lines.clear()
            found = await session.ok("search_memory", query=SECRET_QUERY)
    finally:
        logging.getLogger("memory_mcp.access").removeHandler(access)
    assert found["results"]
    spans = list(traced.spans.get_finished_spans())

    (tool,) = [s for s in spans if s.name == "search_memory"]
    trace = tool.context.trace_id
    (request,) = [s for s in spans if s.context.span_id == tool.parent.span_id]  # type: ignore[union-attr]
    assert request.kind is SpanKind.SERVER and request.name == "POST /mcp"
    assert request.parent is None, "the HTTP request is the trace's root"
    assert [s.name for s in children(spans, request)] == ["search_memory"], "no ASGI receive/send spans"
    under_tool = descendants(spans, tool)
    sql = [s for s in under_tool if s.instrumentation_scope.name == "memory_mcp.sql"]
    assert sql and all(s.kind is SpanKind.CLIENT for s in sql)
    # The search's own statements, run on the driver's connection, are there too: the fusion
    # (WITH ...), the results' rows and the profile (SELECT ...).
    assert {s.name.split()[0] for s in sql} >= {"WITH", "SELECT"}
    assert any((s.attributes or {}).get("db.statement", "").startswith("WITH semantic") for s in sql)
    (embed,) = [s for s in under_tool if s.name == "embed"]
    assert dict(embed.attributes or {}) == {
        "embedder.backend": "local",
        "embedder.kind": "query",
        "embedder.texts": 1,
    }
    assert {s.context.trace_id for s in [request, tool, embed, *sql]} == {trace}
    assert tool.status.status_code is not StatusCode.ERROR

    # The access log's request id is the trace id.
    (line,) = [json.loads(entry) for entry in access.lines if '"route": "/mcp"' in entry]
    assert line["request_id"] == format_trace_id(trace)

    # No span carries the query: not in names, attributes or SQL text.
    exported = json.dumps([json.loads(s.to_json()) for s in spans])
    assert "penguins" not in exported


async def test_a_failing_tool_call_is_an_error_span_without_its_message(traced: Traced) -> None:
    key = await writer_key(traced.server)
    async with mcp_session(traced.server, key) as session:
        traced.spans.clear()
        message = await session.error("search_memory", query="anything", containerTag="no-such-space")
    assert "no-such-space" in message
    (tool,) = [s for s in traced.spans.get_finished_spans() if s.name == "search_memory"]
    assert tool.status.status_code is StatusCode.ERROR
    assert tool.status.description is None
    assert (tool.attributes or {})["error.type"] == "SpaceNotFound"
    assert "no-such-space" not in tool.to_json()


async def test_probes_are_not_traced(traced: Traced) -> None:
    import httpx2

    async with httpx2.AsyncClient(base_url=traced.server.base) as http:
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/v1/spaces?page=1")).status_code == 401
    names = [s.name for s in traced.spans.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert names == ["GET /v1/spaces"]
    (server_span,) = [s for s in traced.spans.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert not {"http.url", "http.target", "url.query", "url.full"} & set(server_span.attributes or {})


async def test_sql_outside_a_trace_starts_no_trace(db: Database) -> None:
    exporter = InMemorySpanExporter()
    assert tracing.setup("memory-mcp-test", exporter)
    try:
        tracing.instrument_engine(db.engine)
        async with db.transaction() as conn:
            await conn.execute(text("SELECT 1"))
        assert exporter.get_finished_spans() == ()
        with tracing.span("backfill"):
            async with db.transaction() as conn:
                await conn.execute(text("SELECT 1"))
        spans = exporter.get_finished_spans()
        (outer,) = [s for s in spans if s.name == "backfill"]
        assert {s.parent.span_id for s in spans if s is not outer} == {outer.context.span_id}  # type: ignore[union-attr]
        assert "SELECT 1" in [(s.attributes or {}).get("db.statement") for s in spans]
    finally:
        tracing.shutdown()


def test_off_by_default_imports_nothing_of_the_sdk() -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    program = (
        "import sys\n"
        "from memory_mcp.core import tracing\n"
        "from memory_mcp.core.settings import Settings\n"
        "from memory_mcp.server.app import create_app\n"
        "from memory_mcp.store.db import Database\n"
        "assert not tracing.setup('memory-mcp-server')\n"
        "create_app(Settings(), Database('postgresql://nobody@127.0.0.1:1/none'))\n"
        "with tracing.span('search_memory') as span:\n"
        "    assert span is None and tracing.trace_id() is None\n"
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.instrumentation'))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], env=environment, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("environment", "wanted"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, False),
    ],
)
def test_the_standard_variables_turn_it_on(environment: dict[str, str], wanted: bool) -> None:
    assert tracing.requested(environment) is wanted
