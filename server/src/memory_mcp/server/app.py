"""The FastAPI application: MCP at /mcp, REST at /v1, health, readiness and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from mcp.server.transport_security import TransportSecuritySettings
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_mcp.core import local_origin, metrics, package_version, tracing, url_host
from memory_mcp.core.logs import describe_exception, request_id_var
from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import BulkPolicy, Embedder, EmbedderUnavailable, make_embedder
from memory_mcp.embedder.static import StaticModelUnavailable, static_model_for
from memory_mcp.server.backfill import backfill, backfill_static
from memory_mcp.store import memories, validation, webhooks
from memory_mcp.store.db import Database
from memory_mcp.store.errors import DatabaseUnavailable, StoreError
from memory_mcp.store.migrate import head_revision

from . import brand, webhook_sender
from .api_docs import install_api_docs
from .bearer import Challenge
from .documents_worker import DocumentWorker
from .mcp_calls import McpAuth
from .mcp_envelope import JsonRpcEnvelope
from .mcp_tools import build_mcp
from .oauth_metadata import install_oauth
from .rest import build_router
from .rest_common import (
    ErrorResponse,
    error_response,
    install_error_handlers,
    internal_error_response,
)
from .rest_documents import UPLOAD_PATHS
from .rest_export import IMPORT_PATHS
from .service import MemoryService
from .throttle import AuthThrottle
from .widget_cors import UploadCors

log = logging.getLogger(__name__)
access_log = logging.getLogger("memory_mcp.access")
BACKFILL_INTERVAL_S = 30.0
RECALL_FLUSH_INTERVAL_S = 2.0
EXPIRY_PURGE_INTERVAL_S = 60.0
WEBHOOK_POLL_INTERVAL_S = 0.5
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# An upload's body is its file plus the multipart boundaries and form fields around it.
UPLOAD_ENVELOPE_BYTES = 64 * 1024


class RequestMetrics:
    """Pure ASGI middleware: per-route counts and latency, and a request id on every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        # With tracing on, the trace id: a log line and its trace share one id.
        request_id = (
            tracing.trace_id()
            or dict(scope["headers"]).get(b"x-request-id", b"").decode()[:64]
            or uuid.uuid4().hex
        )
        token = request_id_var.set(request_id)

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                # A new message and header list: the one passed in may be shared with other responses
                # (the SDK answers every SSE stream with one module-level list), so appending to it
                # piled every request's id onto every later response.
                headers = [*message.get("headers", ()), (b"x-request-id", request_id.encode())]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            request_id_var.reset(token)
            route = _route_label(scope)
            elapsed = time.perf_counter() - started
            metrics.HTTP_REQUESTS.labels(route=route, method=scope["method"], status=str(status)).inc()
            metrics.HTTP_DURATION.labels(route=route, method=scope["method"]).observe(elapsed)
            fields = {
                "route": route,
                "method": scope["method"],
                "status": status,
                "duration_ms": round(elapsed * 1e3, 2),
            }
            access_log.info(
                "%s %s %d", scope["method"], route, status, extra={"request_id": request_id, "fields": fields}
            )


def _route_label(scope: Scope) -> str:
    """The route template, never the raw path: ids in paths would explode the label set."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    raw = scope.get("path", "")
    if isinstance(path, str):
        # A router included in the prefixed `/v1` router keeps its own paths (FastAPI 0.16x): the
        # prefix is the leading segments of the matched path that the template does not cover.
        extra = raw.rstrip("/").count("/") - path.rstrip("/").count("/")
        return "/".join(raw.split("/")[: extra + 1]) + path if extra > 0 else path
    return "/mcp" if raw.startswith("/mcp") else "other"


def _starts_with(path: str, prefix: str) -> bool:
    """Whether ``path`` begins with ``prefix``, each ``*`` in it matching one segment."""
    if "*" not in prefix:
        return path.startswith(prefix)
    return re.match(re.escape(prefix).replace(r"\*", "[^/]+"), path) is not None


class BodyLimit:
    """Pure ASGI middleware: a request body over its path's limit answers 413 and is not read on.

    ``limits`` maps path prefixes to the largest body in bytes, the longest matching prefix
    deciding (``""`` is the default); a ``*`` in a prefix stands for one path segment
    (``/v1/spaces/*/import``). A Content-Length over the limit is refused before the app
    runs; a body sent without one is counted as it arrives and cut off at the limit: the 413 goes
    out, the app's reading fails, and whatever the app answers after that is dropped.
    """

    def __init__(self, app: ASGIApp, limits: Mapping[str, int]) -> None:
        self.app = app
        self.limits = sorted(limits.items(), key=lambda item: len(item[0]), reverse=True)

    def limit_for(self, path: str) -> int | None:
        return next((limit for prefix, limit in self.limits if _starts_with(path, prefix)), None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.limit_for(scope["path"]) if scope["type"] == "http" else None
        if limit is None:
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await _too_large(limit)(scope, receive, send)
            return
        received = 0
        started = refused = False

        async def counted_receive() -> Message:
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    if not refused and not started:
                        await _too_large(limit)(scope, receive, send)
                    refused = True
                    raise BodyTooLarge()
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except Exception:
            if not refused:
                raise


class BodyTooLarge(StarletteHTTPException):
    """Raised into the app when its request body passes the limit (the 413 has been sent already)."""

    def __init__(self) -> None:
        super().__init__(413)


def _too_large(limit: int) -> ErrorResponse:
    return ErrorResponse(413, f"request body must be at most {limit} bytes")


class ErrorBoundary:
    """Pure ASGI middleware: what no handler caught still answers in the one JSON error shape.

    A store error (inside the MCP app: authentication looks the key up in the database, so with
    the database down ``DatabaseUnavailable`` is raised before any tool runs) answers as REST
    would, e.g. 503. Anything else answers 500 without any detail; its traceback goes to the JSON
    log through the project's formatter (exception types and first lines, no data), and stops
    here: the ASGI server would print it again as plain text.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_wrapper(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except StoreError as exc:
            if started:
                raise
            await error_response(exc)(scope, receive, send)
        except Exception as exc:
            log.error(
                "unhandled %s on %s %s",
                describe_exception(exc),
                scope["method"],
                _route_label(scope),
                exc_info=exc,
            )
            if not started:
                await internal_error_response()(scope, receive, send)


async def _internal_error(_: Request, __: Exception) -> Response:
    # The MCP app's own last handler: the same 500 as REST; ErrorBoundary logs the exception.
    return internal_error_response()


def create_app(
    settings: Settings,
    db: Database,
    embedder: Embedder | None = None,
    on_shutdown: Callable[[], None] | None = None,
    wedged: Callable[[], str | None] | None = None,
) -> FastAPI:
    """Build the app. With no ``embedder`` given, one is created at start-up from the settings.

    ``wedged`` says why the process can no longer recover by itself (None while it can); it turns
    ``/healthz`` to 503 so that a supervisor (kubelet, systemd) restarts the process.
    """
    service = MemoryService(db, embedder, settings)
    mcp = build_mcp(service, origin=local_origin(settings.host, settings.port))
    # Behind an ingress the Host header is the public name; loopback binds keep DNS-rebinding checks.
    # Clients send an IPv6 host in brackets ("[::1]:8765"), so the allow-lists hold it so. A public
    # URL (a tunnel to a laptop's loopback server) is a name this server answers to as well.
    loopback = [url_host(h) for h in LOOPBACK]
    public = [settings.public_url.split("://", 1)[1]] if settings.public_url else []
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=settings.host in LOOPBACK,
        allowed_hosts=[f"{h}:{settings.port}" for h in loopback] + loopback + public,
        allowed_origins=[f"http://{h}:{settings.port}" for h in loopback]
        + ([settings.public_url] if settings.public_url else []),
    )
    mcp_app = mcp.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True, transport_security=security
    )
    # Innermost, so after the SDK's authentication: a client without a valid key hears 401 first.
    mcp_app.user_middleware.append(Middleware(JsonRpcEnvelope))
    mcp_app.add_middleware(ErrorBoundary)
    mcp_app.add_exception_handler(Exception, _internal_error)
    head = head_revision()
    # Every serve process works the document queue (document_workers = 0 turns this off).
    workers = [
        DocumentWorker(db, lambda: service.embedder, settings, lambda: service.static)
        for _ in range(settings.document_workers)
    ]

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        owned_embedder = service.embedder is None
        if owned_embedder:
            service.embedder = await _start_embedder(settings)
        await db.check_ready(service.embedder.dim if service.embedder else None)
        # Everything loaded so far (the model, the libraries) lives as long as the process. Frozen,
        # the collector no longer walks those ~600k objects on every full collection: with the
        # in-process model each one stalled all requests for about 300 ms (bench/load.py, p99).
        gc.freeze()
        background = [
            asyncio.create_task(_maintain_embeddings(service, settings)),
            *(
                [asyncio.create_task(_maintain_static(service, settings))]
                if settings.static_embedding
                else []
            ),
            asyncio.create_task(_flush_recalls(service)),
            asyncio.create_task(_purge_expired(service)),
            asyncio.create_task(_deliver_webhooks(service)),
            *(asyncio.create_task(w.run()) for w in workers),
        ]
        try:
            async with mcp.session_manager.run():
                yield
        finally:
            for task in background:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await service.recalls.flush(db)
            if owned_embedder and service.embedder is not None:
                await service.embedder.aclose()
            await db.close()
            if on_shutdown is not None:
                on_shutdown()

    app = FastAPI(
        title="Memory-MCP",
        version=package_version(),
        docs_url=None,  # served by install_api_docs from packaged assets
        redoc_url=None,
        description="Remote memory for AI agents. MCP at /mcp; the same operations as REST under /v1.",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    app.state.service = service
    app.state.document_workers = workers

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> JSONResponse:
        """Liveness: the process answers and can still recover; the database may be down meanwhile."""
        problem = wedged() if wedged is not None else None
        if problem is not None:
            return JSONResponse({"status": "wedged", "reason": problem}, 503)
        return JSONResponse({"status": "ok"})

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        """Readiness: serving now, with the database reachable at the expected schema and an embedder."""
        try:
            async with db.transaction() as conn:
                current = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar()
        except DatabaseUnavailable:
            return JSONResponse({"status": "unavailable", "reason": "database unavailable"}, 503)
        except Exception:
            log.warning("readiness check failed on the database", exc_info=True)
            return JSONResponse({"status": "unavailable", "reason": "database check failed"}, 503)
        if current != head:
            return JSONResponse(
                {"status": "unavailable", "reason": f"schema at {current}, expected {head}"}, 503
            )
        if service.embedder is None:
            return JSONResponse({"status": "unavailable", "reason": "embedder not connected"}, 503)
        return JSONResponse({"status": "ready", "embedder": True})

    @app.get("/metrics", include_in_schema=False)
    async def metrics_endpoint() -> Response:
        size, in_use = db.pool_status()
        metrics.DB_POOL_SIZE.set(size)
        metrics.DB_POOL_IN_USE.set(in_use)
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    app.include_router(build_router(service))
    app.include_router(brand.router())  # the icon that serverInfo and the OAuth pages show
    install_api_docs(app)
    # A route of its own rather than a mount at "/": a mount matches every path, which turned unknown
    # paths into the MCP app's plain-text 404 and a wrong method on a REST route into a 404 too.
    # POST only: the server is stateless and never sends anything unasked, so a GET stream could
    # only ping until the client gave up (and it held shutdown until then). 405 names what is allowed.
    app.router.routes.append(
        Route("/mcp", McpAuth(mcp_app, service), methods=["POST"], include_in_schema=False)
    )
    if settings.oauth_enabled or settings.oauth_issuer:
        install_oauth(app, service)
    # Largest request body by path prefix (the longest matching prefix decides). REST and MCP parse
    # JSON bodies in memory and share the default; an upload route adds its own, larger limit here.
    upload_limit = settings.max_upload_bytes + UPLOAD_ENVELOPE_BYTES
    app.add_middleware(
        BodyLimit,
        limits={"": settings.max_body_bytes, **dict.fromkeys((*UPLOAD_PATHS, *IMPORT_PATHS), upload_limit)},
    )
    app.add_middleware(Challenge, settings=settings)
    app.add_middleware(
        AuthThrottle, db=db, limit=settings.auth_failure_limit, window_s=settings.auth_failure_window_s
    )
    app.add_middleware(UploadCors)  # widgets post files from the host's origin
    app.add_middleware(ErrorBoundary)
    app.add_middleware(RequestMetrics)
    tracing.instrument_app(app)
    tracing.instrument_database(db)
    return app


async def _start_embedder(settings: Settings) -> Embedder | None:
    try:
        return await make_embedder(settings, short_passes_on_onnx=True)
    except EmbedderUnavailable as exc:
        # Serve anyway: search falls back to full text and writes are embedded later.
        log.warning("embedder unavailable at start-up, will retry: %s", exc)
        return None


async def _flush_recalls(service: MemoryService) -> None:
    while True:
        await asyncio.sleep(RECALL_FLUSH_INTERVAL_S)
        try:
            await service.recalls.flush(service.db)
        except DatabaseUnavailable:
            pass  # the database logs the outage once; the next flush tries again
        except Exception:
            log.exception("recording recalls failed")


async def _purge_expired(service: MemoryService) -> None:
    """Retire memories past their expiry's grace period; every pod runs this, one at a time acts."""
    while True:
        await asyncio.sleep(EXPIRY_PURGE_INTERVAL_S)
        try:
            while await memories.purge_expired(service.db, validation.EXPIRED_GRACE_S) > 0:
                pass  # a backlog goes in batches, each its own transaction
        except DatabaseUnavailable:
            pass  # the database logs the outage once; the next round tries again
        except Exception:
            log.exception("purging expired memories failed")


async def _deliver_webhooks(service: MemoryService) -> None:
    """Send the spaces' events to their webhooks; every pod runs this (a webhook's row lock keeps
    one pod at a time on it). Polls: commit to first attempt is at most this interval plus a send."""
    send = webhook_sender.sender(service.settings.oauth_cimd_allow_loopback)
    while True:
        await asyncio.sleep(WEBHOOK_POLL_INTERVAL_S)
        try:
            while await webhooks.deliver_next(service.db, send, datetime.now(UTC)):
                pass
        except DatabaseUnavailable:
            pass  # the database logs the outage once; the next round tries again
        except Exception:
            log.exception("delivering webhooks failed")


async def _maintain_static(service: MemoryService, settings: Settings) -> None:
    """Load (or first distil) the static model off the request path, then keep every memory's
    static vector filled in: rows saved before it existed, or while it was being distilled."""
    try:
        service.static = await static_model_for(settings)
    except (StaticModelUnavailable, OSError) as exc:
        log.warning("the static embedding is off (search uses two signals): %s", exc)
        return
    if service.static is None:
        return
    log.info("static embedding ready (%s)", service.static.path)
    while True:
        try:
            done = await backfill_static(service.db, service.static)
            if done:
                log.info("computed the static vector of %d memories", done)
        except DatabaseUnavailable:
            pass  # the database logs the outage once; the next round tries again
        except Exception:
            log.exception("background static embedding failed")
        await asyncio.sleep(BACKFILL_INTERVAL_S)


async def _maintain_embeddings(service: MemoryService, settings: Settings) -> None:
    """Reconnect a missing embedder and embed what was saved while it was down."""
    while True:
        await asyncio.sleep(BACKFILL_INTERVAL_S)
        try:
            # Counted first: the gauge must show what waits while the embedder is away, too.
            pending = await memories.count_missing_embeddings(service.db)
            metrics.MEMORIES_PENDING_EMBEDDING.set(pending)
            if service.embedder is None:
                service.embedder = await _start_embedder(settings)
                if service.embedder is None:
                    continue
                await service.db.check_ready(service.embedder.dim)
            if pending:
                done = await backfill(
                    service.db,
                    service.embedder,
                    settings.embedder_max_batch,
                    policy=BulkPolicy.from_settings(settings),
                )
                log.info("embedded %d memories saved while the embedder was unavailable", done)
        except EmbedderUnavailable as exc:
            log.warning("background embedding skipped: %s", exc)
        except DatabaseUnavailable:
            pass  # the database logs the outage once; the next round tries again
        except Exception:
            log.exception("background embedding failed")
