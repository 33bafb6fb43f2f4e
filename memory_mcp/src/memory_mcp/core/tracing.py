"""OpenTelemetry traces, exported by OTLP (http/protobuf) when the standard variables name an endpoint.

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (and
``OTEL_SDK_DISABLED`` is not ``true``). Off, nothing of OpenTelemetry's SDK is imported and every hook
here returns at once. These are the SDK's own variables, which its exporter reads too (headers,
timeouts, ``OTEL_SERVICE_NAME``); they are not Memory-MCP settings.

On, the process gets its own tracer provider (the global one is left alone, so a test can trace one
app and not the next). The hooks: the FastAPI app (one server span per request), the database
(one span per statement, through the SQLAlchemy engine or the driver's own connection), the
embedder's HTTP client, and named spans around what the code runs (``span("search_memory")``,
``span("embed")``). Spans carry no request data: the exporter drops query
strings and full URLs, and error descriptions and exception messages, which may quote a refused value
(see ``core.logs``); what failed stays in the status code and the exception's type.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.trace import Span, Tracer
    from sqlalchemy.ext.asyncio import AsyncEngine

    from memory_mcp.store.db import Database

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
INSTALL_HINT = "pip install 'memory-mcp-core[tracing]'"
# Paths no one wants a trace of: probes and scrapes, every few seconds.
UNTRACED_PATHS = "healthz,readyz,metrics"
# Span attributes that may hold request data (a search query in a query string).
DROPPED_ATTRIBUTES = frozenset({"http.url", "http.target", "url.full", "url.query"})
# Exception event attributes that may quote data; the type stays.
DROPPED_EXCEPTION_ATTRIBUTES = frozenset({"exception.message", "exception.stacktrace"})

_provider: TracerProvider | None = None
_tracer: Tracer | None = None


class TracingNotInstalled(Exception):
    """An endpoint is set but the tracing extra is missing."""


def requested(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for traces (an OTLP endpoint, and the SDK not disabled)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def setup(service_name: str, exporter: SpanExporter | None = None) -> bool:
    """Turn tracing on for this process when the environment asks for it, or with ``exporter``
    (spans go there instead of OTLP; tests pass an in-memory one). Returns whether tracing is on.

    ``service_name`` is the default of ``service.name``; ``OTEL_SERVICE_NAME`` overrides it.
    Raises :class:`TracingNotInstalled` when an endpoint is set and the SDK is missing.
    """
    global _provider, _tracer
    if exporter is None and not requested():
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError as exc:
        raise TracingNotInstalled(
            f"{' or '.join(ENDPOINT_VARIABLES)} is set but tracing is not installed: {INSTALL_HINT}"
        ) from exc
    resource = Resource.create({} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name})
    provider = TracerProvider(resource=resource)
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(_scrubbing(OTLPSpanExporter())))
    else:
        provider.add_span_processor(SimpleSpanProcessor(_scrubbing(exporter)))
    _provider, _tracer = provider, provider.get_tracer("memory_mcp")
    return True


def shutdown() -> None:
    """Flush what is pending and turn tracing off (hooks applied earlier stop recording)."""
    global _provider, _tracer
    if _provider is not None:
        _provider.shutdown()
    _provider = _tracer = None


def enabled() -> bool:
    return _provider is not None


@contextmanager
def span(name: str, **attributes: str | int | float | bool) -> Iterator[Span | None]:
    """A span named ``name`` around the block, a child of the current one; nothing when tracing is off.

    An exception leaving the block marks the span as failed, with the exception's type only.
    """
    if _tracer is None:
        yield None
        return
    from opentelemetry.trace import Status, StatusCode

    with _tracer.start_as_current_span(
        name, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except BaseException as exc:
            current.set_status(Status(StatusCode.ERROR))
            current.set_attribute("error.type", type(exc).__qualname__)
            raise


def trace_id() -> str | None:
    """The current trace's id (32 hex digits), or None when tracing is off or no span is current."""
    if _tracer is None:
        return None
    from opentelemetry.trace import format_trace_id, get_current_span

    context = get_current_span().get_span_context()
    return format_trace_id(context.trace_id) if context.is_valid else None


def instrument_app(app: FastAPI) -> None:
    """One server span per HTTP request (probes and /metrics left out)."""
    if _provider is None:
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    # Without the ASGI layer's own "http receive" / "http send" spans: two or three per request that
    # say nothing the server span does not.
    FastAPIInstrumentor.instrument_app(
        app, tracer_provider=_provider, excluded_urls=UNTRACED_PATHS, exclude_spans=["receive", "send"]
    )


def instrument_engine(engine: AsyncEngine) -> None:
    """One span per SQL statement run on ``engine`` (its text with placeholders, never its parameters)."""
    if _provider is None:
        return
    from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.trace import INVALID_SPAN, get_current_span

    tracer = _provider.get_tracer("memory_mcp.sql")

    class InTracesOnly:
        """Statements outside a trace get no span: each background loop's (embedding backfill,
        recall flush, document queue) would otherwise be a trace of its own, every few seconds."""

        def start_span(self, name: str, *args: Any, **kwargs: Any) -> Span:
            if not get_current_span().get_span_context().is_valid:
                return INVALID_SPAN
            return tracer.start_span(name, *args, **kwargs)

    # Per engine, not SQLAlchemyInstrumentor().instrument(): that patches create_engine for the whole
    # process, and instruments only once.
    usage = NoOpMeterProvider().get_meter(__name__).create_up_down_counter("db.client.connections.usage")
    EngineTracer(InTracesOnly(), engine.sync_engine, usage)  # type: ignore[no-untyped-call]


def instrument_database(db: Database) -> None:
    """One span per SQL statement of ``db``: the engine's (``instrument_engine``) and those the hot
    read paths run on the driver's own connection (``Database.execute``: a search's two, the
    profile's one), named and described as the engine's are, inside a trace only. The driver's
    other statements (a transaction's settings, authentication's reads) stay untraced."""
    instrument_engine(db.engine)
    if _provider is None:
        return
    from opentelemetry.trace import SpanKind, get_current_span

    tracer = _provider.get_tracer("memory_mcp.sql")

    @contextmanager
    def statement_span(sql: str) -> Iterator[None]:
        if not get_current_span().get_span_context().is_valid:
            yield
            return
        operation = sql.lstrip("( \n").split(None, 1)[0]  # as the engine's spans: the first word
        attributes = {"db.system": "postgresql", "db.statement": sql}
        with tracer.start_as_current_span(
            operation, kind=SpanKind.CLIENT, attributes=attributes, record_exception=False
        ):
            yield

    db.around_statement = statement_span


def instrument_http_client(client: Any) -> None:
    """One client span per request of an ``httpx2.AsyncClient``, with the trace context propagated."""
    if _provider is None:
        return
    from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor

    HTTPX2ClientInstrumentor.instrument_client(client, tracer_provider=_provider)


def _scrubbing(exporter: SpanExporter) -> SpanExporter:
    """``exporter`` behind a filter that drops what may carry request data (see the module's doc)."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Status

    def scrubbed(span: ReadableSpan) -> ReadableSpan:
        events = [
            Event(
                event.name,
                {k: v for k, v in (event.attributes or {}).items() if k not in DROPPED_EXCEPTION_ATTRIBUTES},
                event.timestamp,
            )
            for event in span.events
        ]
        return ReadableSpan(
            name=span.name,
            context=span.context,
            parent=span.parent,
            resource=span.resource,
            attributes={k: v for k, v in (span.attributes or {}).items() if k not in DROPPED_ATTRIBUTES},
            events=events,
            links=span.links,
            kind=span.kind,
            status=Status(span.status.status_code),
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )

    class Scrubbing(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return exporter.export([scrubbed(span) for span in spans])

        def shutdown(self) -> None:
            exporter.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return exporter.force_flush(timeout_millis)

    return Scrubbing()
