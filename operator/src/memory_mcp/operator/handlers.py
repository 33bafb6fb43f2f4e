"""kopf handlers: each one calls a reconciler and writes ``patch.status`` and Events; nothing else.

Handlers return nothing: the CRDs' status schemas are strict, so kopf's ``status.<handler>``
results would be pruned. Every kind gets create/update/resume (reconcile), a timer (resync, which
repairs drift made behind the operator's back) and delete (behind kopf's finalizer).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf
from sqlalchemy.exc import SQLAlchemyError

from memory_mcp.core.metrics import RECONCILE_DURATION, RECONCILE_ERRORS, RECONCILES
from memory_mcp.store.db import Database

from . import reconcile
from .kube_secrets import KubernetesSecretReader, KubernetesSecretStore, Owner
from .outcome import Outcome
from .specs import GROUP, VERSION
from .status import ready_condition, status_update

# A reconcile of one object: (name, spec, body) -> outcome.
Work = Callable[[str, Mapping[str, Any], kopf.Body], Awaitable[Outcome]]


@dataclass(frozen=True)
class OperatorOptions:
    """Tunables of the operator (the CLI sets them; tests shorten the intervals)."""

    resync_interval: float = 60.0
    retry_delay: float = 15.0
    secret_namespaces: frozenset[str] | None = None  # None: Secrets may live in any namespace
    # Webhook receivers on loopback (the server's oauth_cimd_allow_loopback: development and tests).
    allow_loopback_receivers: bool = False


@dataclass
class OperatorContext:
    """What the handlers share: the database, the Kubernetes API for Secrets, the options."""

    db: Database
    core_api: Any  # kubernetes.client.CoreV1Api
    options: OperatorOptions = field(default_factory=OperatorOptions)
    _locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)

    def lock(self, kind: str, name: str) -> asyncio.Lock:
        """One reconcile at a time per object: the resync timer and change handlers run concurrently."""
        return self._locks.setdefault((kind, name), asyncio.Lock())

    def forget(self, kind: str, name: str) -> None:
        self._locks.pop((kind, name), None)

    def secrets_for(self, body: Mapping[str, Any]) -> KubernetesSecretStore:
        return KubernetesSecretStore(self.core_api, Owner.of(body), self.options.secret_namespaces)

    def secret_reader(self) -> KubernetesSecretReader:
        return KubernetesSecretReader(self.core_api, self.options.secret_namespaces)


def _failure_reason(exc: BaseException) -> str:
    return "DatabaseError" if isinstance(exc, SQLAlchemyError) else "InternalError"


@dataclass(frozen=True)
class _Declared:
    """The spec a reconcile worked from, and the generation it belongs to (read together)."""

    spec: dict[str, Any]
    generation: int | None


def _declared(body: kopf.Body) -> _Declared:
    generation = body.metadata.get("generation")
    return _Declared(copy.deepcopy(dict(body.spec)), generation if isinstance(generation, int) else None)


async def _run(
    ctx: OperatorContext, kind: str, body: kopf.Body, work: Callable[[dict[str, Any]], Awaitable[Outcome]]
) -> tuple[Outcome, _Declared]:
    """Run one reconcile under the object's lock, counting it in the operator metrics.

    The spec is read once the lock is held: a timer's body is live, so a resync that waited for a
    change handler works from the newest spec, and the observedGeneration it reports is the one
    it applied.
    """
    async with ctx.lock(kind, body.metadata.name or ""):
        declared = _declared(body)
        with RECONCILE_DURATION.labels(kind).time():
            try:
                outcome = await work(declared.spec)
            except Exception as exc:
                RECONCILES.labels(kind, "error").inc()
                RECONCILE_ERRORS.labels(kind, _failure_reason(exc)).inc()
                raise
    RECONCILES.labels(kind, "ready" if outcome.ready else "not_ready").inc()
    if not outcome.ready:
        RECONCILE_ERRORS.labels(kind, outcome.reason).inc()
    return outcome, declared


def _report(
    body: kopf.Body, patch: kopf.Patch, outcome: Outcome, generation: int | None, *, resync: bool
) -> None:
    """Write the status and post Events for what changed or went wrong (not for every resync)."""
    previous = ready_condition(body.status)
    for key, value in status_update(body.status, outcome, generation).items():
        patch.status[key] = value
    if outcome.changes:
        summary = "; ".join(outcome.changes)
        # A resync that changes an object that was Ready found drift; one that completes an object
        # still waiting for its first reconcile is ordinary progress.
        if resync and previous is not None and previous.get("status") == "True":
            kopf.warn(body, reason="DriftRepaired", message=f"The database had drifted: {summary}.")
        else:
            message = summary[0].upper() + summary[1:] + "."
            kopf.event(body, type="Normal", reason=outcome.reason, message=message)
    repeated = previous is not None and (previous.get("status"), previous.get("reason")) == (
        "False",
        outcome.reason,
    )
    if not outcome.ready and not repeated:
        kopf.warn(body, reason=outcome.reason, message=outcome.message)


def _failed_status(body: kopf.Body, patch: kopf.Patch, exc: Exception) -> None:
    text = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    failed = Outcome(False, _failure_reason(exc), f"Reconcile failed and will be retried: {text}")
    for key, value in status_update(body.status, failed, None).items():
        patch.status[key] = value


def _backoff(retry: int, ceiling: float) -> float:
    """0.5 s, 1 s, 2 s... up to ``ceiling``: the delay before the next try of a waiting reconcile."""
    return float(min(ceiling, 0.5 * 2 ** min(retry, 16)))


def _register(
    registry: kopf.OperatorRegistry, ctx: OperatorContext, kind: str, plural: str, apply: Work, remove: Work
) -> None:
    async def handle(name: str, body: kopf.Body, patch: kopf.Patch, resync: bool) -> Outcome:
        try:
            outcome, declared = await _run(ctx, kind, body, lambda spec: apply(name, spec, body))
        except Exception as exc:
            _failed_status(body, patch, exc)
            raise  # kopf retries with backoff
        _report(body, patch, outcome, declared.generation, resync=resync)
        return outcome

    async def reconcile_object(name: str, body: kopf.Body, patch: kopf.Patch, retry: int, **_: Any) -> None:
        outcome = await handle(name, body, patch, resync=False)
        if outcome.retry:
            # What it waits for (a User or Space of the same `kubectl apply`) usually lands within a
            # second: retry soon, then back off to the configured delay.
            raise kopf.TemporaryError(outcome.message, delay=_backoff(retry, ctx.options.retry_delay))

    async def resync_object(name: str, body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        await handle(name, body, patch, resync=True)

    async def remove_object(name: str, body: kopf.Body, **_: Any) -> None:
        outcome = (await _run(ctx, kind, body, lambda spec: remove(name, spec, body)))[0]
        ctx.forget(kind, name)
        if outcome.changes:
            kopf.event(body, type="Normal", reason=outcome.reason, message=outcome.message)

    resource = (GROUP, VERSION, plural)
    kopf.on.create(*resource, registry=registry, id="reconcile")(reconcile_object)
    kopf.on.update(*resource, registry=registry, id="reconcile")(reconcile_object)
    kopf.on.resume(*resource, registry=registry, id="reconcile")(reconcile_object)
    kopf.timer(
        *resource,
        registry=registry,
        id="resync",
        interval=ctx.options.resync_interval,
        initial_delay=ctx.options.resync_interval,
    )(resync_object)
    kopf.on.delete(*resource, registry=registry, id="remove")(remove_object)


def build_registry(ctx: OperatorContext) -> kopf.OperatorRegistry:
    """A registry with the handlers of Space, User and ApiKey (no login handler: the caller adds one)."""
    registry = kopf.OperatorRegistry()
    db = ctx.db

    async def apply_space(name: str, spec: Mapping[str, Any], body: kopf.Body) -> Outcome:
        return await reconcile.reconcile_space(
            db,
            name,
            spec,
            webhook_secrets=ctx.secret_reader(),
            allow_loopback_receivers=ctx.options.allow_loopback_receivers,
        )

    async def remove_space(name: str, spec: Mapping[str, Any], body: kopf.Body) -> Outcome:
        return await reconcile.remove_space(db, name, spec)

    async def apply_user(name: str, spec: Mapping[str, Any], body: kopf.Body) -> Outcome:
        return await reconcile.reconcile_user(db, name, spec)

    async def remove_user(name: str, spec: Mapping[str, Any], body: kopf.Body) -> Outcome:
        return await reconcile.remove_user(db, name)

    async def apply_apikey(name: str, spec: Mapping[str, Any], body: kopf.Body) -> Outcome:
        return await reconcile.reconcile_apikey(db, name, spec, ctx.secrets_for(body))

    async def remove_apikey(name: str, spec: Mapping[str, Any], body: kopf.Body) -> Outcome:
        return await reconcile.remove_apikey(db, name, spec, ctx.secrets_for(body))

    _register(registry, ctx, "Space", "spaces", apply_space, remove_space)
    _register(registry, ctx, "User", "users", apply_user, remove_user)
    _register(registry, ctx, "ApiKey", "apikeys", apply_apikey, remove_apikey)
    return registry
