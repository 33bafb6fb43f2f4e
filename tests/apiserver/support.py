"""Helpers of the API-server tier: the operator process, declaring objects, latencies."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from memory_mcp.store import identity
from memory_mcp.store.db import Database
from memory_mcp.store.errors import AuthenticationFailed
from tests.apiserver.kube import Kube, wait_for

# The namespace the tests' ApiKeys write their Secrets to.
SECRET_NAMESPACE = "agents"

# Latencies measured by the tests, printed at the end of the run: {what: [seconds, ...]}.
LATENCIES: dict[str, list[float]] = {}
# Where the control plane's and the operator's logs are, printed at the end of the run.
LOGS: list[Path] = []


def record_latency(what: str, seconds: float) -> None:
    LATENCIES.setdefault(what, []).append(seconds)


class OperatorProcess:
    """``memory-mcp operator`` as a child process, logging to a file."""

    def __init__(self, process: asyncio.subprocess.Process, log: Path, port: int) -> None:
        self.process, self.log, self.port = process, log, port

    def alive(self) -> bool:
        return self.process.returncode is None

    def output(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Declared:
    space: str
    user: str
    apikey: str
    secret: str
    key: str


async def declare(kube: Kube, prefix: str, *, together: bool = False) -> Declared:
    """A Space, a User and an ApiKey granting the space; waits for the key in its Secret.

    By default the ApiKey is created once its Space and User are Ready, so the time to its Secret
    is the operator's reaction to the ApiKey alone. ``together`` creates all three at once, as
    ``kubectl apply -f`` of one file does: the ApiKey's first reconcile then usually finds no User
    yet and waits for a retry or the resync.
    """
    space, user, apikey = f"{prefix}-space", f"{prefix}-user", f"{prefix}-key"
    await kube.create_object(
        "Space", space, {"displayName": f"Space of {prefix}", "deletionPolicy": "Delete"}
    )
    await kube.create_object(
        "User", user, {"email": f"{prefix}@example.com", "displayName": f"User {prefix}", "role": "Writer"}
    )
    if not together:
        for kind, name in (("Space", space), ("User", user)):
            await wait_for(partial(ready_true, kube, kind, name), what=f"Ready on {kind} {name}")
    started = time.monotonic()
    await kube.create_object(
        "ApiKey",
        apikey,
        {
            "user": user,
            "grants": [{"space": space, "access": "ReadWrite"}],
            "secretRef": {"namespace": SECRET_NAMESPACE, "name": apikey},
        },
    )
    key, _ = await wait_for(
        partial(kube.secret_key, SECRET_NAMESPACE, apikey), what=f"the Secret of {apikey}", within=60
    )
    what = "with its Space and User in the same instant" if together else "alone"
    record_latency(f"Secret after ApiKey create ({what})", time.monotonic() - started)
    await wait_for(partial(ready_true, kube, "ApiKey", apikey), what=f"Ready on ApiKey {apikey}")
    return Declared(space, user, apikey, apikey, key)


async def ready_true(kube: Kube, kind: str, name: str) -> dict[str, Any] | None:
    """The Ready condition once it is True, else None."""
    condition = await kube.ready(kind, name)
    return condition if condition.get("status") == "True" else None


async def ready_because(kube: Kube, kind: str, name: str, reason: str) -> dict[str, Any] | None:
    """The Ready condition once its reason is ``reason``, else None."""
    condition = await kube.ready(kind, name)
    return condition if condition.get("reason") == reason else None


async def observed(kube: Kube, kind: str, name: str, generation: int) -> bool:
    condition = await kube.ready(kind, name)
    return bool(condition.get("observedGeneration") == generation and condition.get("status") == "True")


async def grants_of(db: Database, key: str) -> dict[str, str]:
    caller = await identity.authenticate(db, key)
    return {g.space.key: g.access.value for g in caller.grants}


async def grants_are(db: Database, key: str, wanted: dict[str, str]) -> bool:
    return await grants_of(db, key) == wanted


async def refused(db: Database, key: str) -> bool:
    try:
        await identity.authenticate(db, key)
    except AuthenticationFailed:
        return True
    return False


async def gone(found: Any) -> bool:
    """True when the awaited lookup (``kube.get``, ``kube.secret``) finds nothing."""
    return await found is None
