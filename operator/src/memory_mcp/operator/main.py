"""Run the operator: open the database, run kopf cluster-wide, serve /healthz and /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

import kopf
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from memory_mcp.core.database import prepare_database
from memory_mcp.core.metrics import OPERATOR_RESTARTS
from memory_mcp.core.settings import Settings
from memory_mcp.store.db import Database

from .handlers import OperatorContext, OperatorOptions, build_registry

FINALIZER = "memory-mcp.io/finalizer"
ANNOTATION_PREFIX = "memory-mcp.io"
# Seconds between kopf stopping on an error and starting again; the last repeats. A run that lasted
# RESTART_RESET_SECONDS starts the sequence over.
RESTART_BACKOFF = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)
RESTART_RESET_SECONDS = 300.0
# Seconds kopf is given to finish its shutdown once it has reported failing, then again once cancelled.
KOPF_STOP_GRACE_S = 10.0

log = logging.getLogger(__name__)


def operator_settings() -> kopf.OperatorSettings:
    """kopf settings: our own finalizer and annotation names, and no status fields of kopf's own."""
    settings = kopf.OperatorSettings()
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    # kopf logs every handler run at INFO; posting those as Events would add one per object per
    # resync. The handlers post the Events that matter themselves.
    settings.posting.level = logging.WARNING
    # A resync that is running when its object is deleted finishes within a second; check again
    # that soon instead of kopf's default minute, so deletion is not held up.
    settings.background.cancellation_polling = 1.0
    # Reconnect watches now and then, so a silently dropped connection cannot stall the operator.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    return settings


async def serve_probes(host: str, port: int, ready: asyncio.Event | threading.Event) -> web.AppRunner:
    """``/healthz`` (200 once kopf has started) and ``/metrics`` (Prometheus text format)."""

    async def healthz(request: web.Request) -> web.Response:
        if ready.is_set():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="starting\n")

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


async def operate(
    db: Database,
    core_api: Any,
    options: OperatorOptions | None = None,
    *,
    login: Callable[..., Any] | None = None,
    probe_host: str = "0.0.0.0",
    probe_port: int | None = None,
    stop_flag: asyncio.Future[Any] | asyncio.Event | threading.Event | None = None,
    ready: asyncio.Event | threading.Event | None = None,
) -> None:
    """Run kopf cluster-wide over ``db`` until ``stop_flag`` (or SIGINT/SIGTERM).

    ``core_api`` is a ``kubernetes`` ``CoreV1Api`` for Secrets; ``login`` defaults to kopf's login
    through the same client's configuration (in-cluster service account or kubeconfig).
    """
    ctx = OperatorContext(db, core_api, options or OperatorOptions())
    registry = build_registry(ctx)
    kopf.on.login(registry=registry)(login or kopf.login_via_client)
    ready = ready or asyncio.Event()
    runner = await serve_probes(probe_host, probe_port, ready) if probe_port is not None else None
    try:
        failures = 0
        while True:
            started = time.monotonic()
            try:
                await _kopf_until_stopped_or_failed(
                    kopf.operator(
                        registry=registry,
                        settings=operator_settings(),
                        clusterwide=True,
                        standalone=True,  # one replica (Recreate); no peering objects to manage
                        stop_flag=stop_flag,
                        ready_flag=ready,
                    )
                )
                return  # stopped: a signal or the stop flag
            except Exception as exc:
                # kopf retries a lost connection for ever, but a watch refused outright (403 while a
                # restarted API server loads its RBAC, 404 before it serves the CRDs again) stops
                # every watch and kopf with it. Start it again rather than live on without watches.
                ready.clear()  # /healthz answers 503 until kopf is back
                failures = 0 if time.monotonic() - started >= RESTART_RESET_SECONDS else failures
                delay = RESTART_BACKOFF[min(failures, len(RESTART_BACKOFF) - 1)]
                failures += 1
                OPERATOR_RESTARTS.labels(type(exc).__name__).inc()
                log.error(
                    "kopf stopped on %s: %s; starting it again in %.0f s", type(exc).__name__, exc, delay
                )
                if await _stopped_within(stop_flag, delay):
                    return
    finally:
        if runner is not None:
            await runner.cleanup()


class _KopfFailure(logging.Handler):
    """Catches kopf's own line on its operator task failing (a watch refused stops them all)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.failed = asyncio.Event()
        self.error: BaseException | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Multidimensional multitasker has failed"):
            self.error = record.exc_info[1] if record.exc_info else None
            self.failed.set()


class KopfDidNotStop(Exception):
    """kopf's operator task failed and its shutdown did not finish in time."""


async def _kopf_until_stopped_or_failed(operator: Coroutine[Any, Any, None]) -> None:
    """Run kopf until it returns (stopped) or raises, and no longer than KOPF_STOP_GRACE_S past its
    own report of failing: its shutdown has been seen to wait for ever once its watches failed (with
    many objects' timers running), which would leave this process alive and watching nothing."""
    watcher = _KopfFailure()
    kopf_log = logging.getLogger("kopf._core.reactor.running")
    kopf_log.addHandler(watcher)
    task = asyncio.ensure_future(operator)
    failed = asyncio.ensure_future(watcher.failed.wait())
    try:
        await asyncio.wait({task, failed}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            await asyncio.wait({task}, timeout=KOPF_STOP_GRACE_S)
        if not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=KOPF_STOP_GRACE_S)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        failed.cancel()
        kopf_log.removeHandler(watcher)
    if not task.done():
        log.error(
            "kopf did not stop within %.0f s of failing; leaving what is left of it", 2 * KOPF_STOP_GRACE_S
        )
    if not task.done() or task.cancelled():
        why = "kopf was cancelled" if task.done() else "kopf did not stop"
        raise watcher.error if isinstance(watcher.error, Exception) else KopfDidNotStop(why)
    task.result()


async def _stopped_within(
    stop_flag: asyncio.Future[Any] | asyncio.Event | threading.Event | None, seconds: float
) -> bool:
    """Wait ``seconds``; True as soon as ``stop_flag`` is set or SIGINT/SIGTERM arrives meanwhile
    (kopf, stopped, no longer listens for them)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    watched: list[signal.Signals] = []
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
                watched.append(sig)
    try:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if stop.is_set() or _is_set(stop_flag):
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), min(left, 0.2))
        return stop.is_set() or _is_set(stop_flag)
    finally:
        for sig in watched:
            loop.remove_signal_handler(sig)


def _is_set(flag: asyncio.Future[Any] | asyncio.Event | threading.Event | None) -> bool:
    if flag is None:
        return False
    if isinstance(flag, asyncio.Future):
        return flag.done()
    return flag.is_set()


class KubernetesConfigMissing(Exception):
    """Neither an in-cluster service account nor a kubeconfig is available."""


def kubernetes_core_api() -> Any:
    """A CoreV1Api from the in-cluster service account, else from the local kubeconfig."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        try:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        except (config.ConfigException, OSError) as exc:
            raise KubernetesConfigMissing(
                "no Kubernetes credentials: run the operator in a cluster (service account) or point "
                f"KUBECONFIG at a kubeconfig ({exc})"
            ) from None
    return client.CoreV1Api()


def run_operator(
    settings: Settings,
    *,
    host: str = "0.0.0.0",
    port: int = 8080,
    options: OperatorOptions | None = None,
) -> None:
    """Prepare the database (embedded or ``settings.database_url``) and run the operator until stopped.

    Raises :class:`KubernetesConfigMissing` before touching the database when no cluster is reachable.
    """
    core_api = kubernetes_core_api()
    # Webhook receivers pass the same address check as in the server, loopback included.
    options = replace(
        options or OperatorOptions(), allow_loopback_receivers=settings.oauth_cimd_allow_loopback
    )
    prepared = prepare_database(settings)
    try:
        asyncio.run(_run(prepared.open(settings.db_pool_size), core_api, host, port, options))
    finally:
        prepared.stop()


async def _run(db: Database, core_api: Any, host: str, port: int, options: OperatorOptions | None) -> None:
    try:
        await operate(db, core_api, options, probe_host=host, probe_port=port)
    finally:
        await db.close()
