"""The trace of one search_memory, as an OTLP collector receives it from `memory-mcp serve`.

Starts a loopback OTLP/HTTP receiver (protobuf, what the exporter sends to /v1/traces), a
`memory-mcp serve` process with OTEL_EXPORTER_OTLP_ENDPOINT pointing at it, saves a memory and
searches for it over MCP, then prints the search's trace as a tree: span, kind, duration, and the
attributes that say what ran (the SQL text has placeholders only).

    python -m bench.trace_example
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from bench.common import free_port, serve_process

SHOWN_ATTRIBUTES = ("http.route", "http.status_code", "db.statement", "embedder.kind", "embedder.texts")
KINDS = {
    Span.SPAN_KIND_SERVER: "server",
    Span.SPAN_KIND_CLIENT: "client",
    Span.SPAN_KIND_INTERNAL: "internal",
}


class Receiver(BaseHTTPRequestHandler):
    spans: ClassVar[list[Span]] = []

    def do_POST(self) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                self.spans.extend(scope.spans)
        body = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def receiver() -> Iterator[int]:
    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield port
    finally:
        server.shutdown()


def wait_ready(port: int, data_dir: Path, timeout_s: float = 600) -> str:
    deadline = time.monotonic() + timeout_s
    key_file = data_dir / "bootstrap-key"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
                if response.status == 200 and key_file.exists():
                    return key_file.read_text().strip()
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError("the server did not get ready")


async def search(port: int, key: str) -> None:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)) as client,
    ):
        await client.call_tool("add_memory", {"content": "The staging cluster runs in eu-central-1."})
        # Warm: the first search pays for the model's first query and the connection pool.
        await client.call_tool("search_memory", {"query": "which region hosts production?"})
        await asyncio.sleep(1)
        Receiver.spans.clear()
        await client.call_tool("search_memory", {"query": "where does staging run?"})


def attribute(span: Span, name: str) -> str | None:
    for item in span.attributes:
        if item.key == name:
            value = item.value
            return " ".join(str(getattr(value, value.WhichOneof("value"))).split())
    return None


def print_tree(spans: list[Span]) -> None:
    (tool,) = [s for s in spans if s.name == "search_memory"]
    trace = [s for s in spans if s.trace_id == tool.trace_id]
    by_parent: dict[bytes, list[Span]] = {}
    for span in trace:
        by_parent.setdefault(span.parent_span_id, []).append(span)
    start = min(s.start_time_unix_nano for s in trace)
    print(f"trace {tool.trace_id.hex()}: {len(trace)} spans")

    def show(span: Span, depth: int) -> None:
        offset = (span.start_time_unix_nano - start) / 1e6
        duration = (span.end_time_unix_nano - span.start_time_unix_nano) / 1e6
        details = [f"{name}={value}" for name in SHOWN_ATTRIBUTES if (value := attribute(span, name))]
        line = f"{'  ' * depth}{span.name:<{44 - 2 * depth}} {KINDS.get(span.kind, '?'):<8} +{offset:7.1f} ms {duration:7.1f} ms"
        print(line + ("  " + " ".join(details)[:110] if details else ""))
        for child in sorted(by_parent.get(span.span_id, []), key=lambda s: s.start_time_unix_nano):
            show(child, depth + 1)

    for root in by_parent.get(b"", []):
        show(root, 0)


def main() -> None:
    with receiver() as collector:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{collector}"
        os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "100"
        with serve_process("memory-mcp-trace-") as (_, data_dir, port):
            key = wait_ready(port, data_dir)
            asyncio.run(search(port, key))
            deadline = time.monotonic() + 30
            while not any(s.name == "search_memory" for s in Receiver.spans) and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(1)
    print_tree(list(Receiver.spans))


if __name__ == "__main__":
    main()
