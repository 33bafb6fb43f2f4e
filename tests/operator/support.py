"""Run the real operator (kopf) in-process against kmock's Kubernetes emulator and a real database.

The emulator runs on its own thread and event loop, like a separate API server: kopf treats every
task started on its loop after start-up as its own and waits for them when it stops, which the
emulator's never-ending watch streams would delay. The emulator stores objects and serves
list/watch/patch, but sets no ``uid``, ``generation`` or ``resourceVersion``: the helpers below
set them as the API server would (generation + 1 on every spec change, a new resourceVersion on
every write).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import itertools
import sys
import threading
import time
import traceback
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import kopf
import kubernetes
import psycopg
import yaml

from memory_mcp.operator.handlers import OperatorOptions
from memory_mcp.operator.main import operate
from memory_mcp.store.db import Database

CRD_DIR = Path(__file__).resolve().parents[2] / "crds"
GROUP_VERSION = "memory-mcp.io/v1alpha1"
PLURALS = {"Space": "spaces", "User": "users", "ApiKey": "apikeys"}
SECRETS = kmock.resource("v1/secrets")
# Short enough that a test sees several resyncs and retries within a few seconds.
OPTIONS = OperatorOptions(resync_interval=0.6, retry_delay=0.3)

# The User and ApiKey the tests declare, in their spec form.
USER = {"email": "ada@example.com", "displayName": "Ada Lovelace", "role": "Writer"}


def key_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "user": "ada",
        "grants": [{"space": "alpha", "access": "ReadWrite"}],
        "defaultSpace": "alpha",
        "secretRef": {"namespace": "agents", "name": "ada-key"},
    }
    return {**spec, **overrides}


_uids = itertools.count(1)


def crd_resources() -> dict[str, kmock.ResourceInfo]:
    """The CRDs of crds/ as the emulator's resource discovery entries."""
    found = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        names = crd["spec"]["names"]
        for version in crd["spec"]["versions"]:
            found[f"{crd['spec']['group']}/{version['name']}/{names['plural']}"] = kmock.ResourceInfo(
                kind=names["kind"],
                singular=names["singular"],
                namespaced=crd["spec"]["scope"] == "Namespaced",
                verbs={"list", "watch", "get", "create", "patch", "update", "delete"},
                subresources=set(version.get("subresources", {})),
            )
    return found


_versions = itertools.count(2)


class VersionedEmulator(kmock.KubernetesEmulator):
    """The emulator plus what the API server does on every write: a new ``resourceVersion``.

    kopf needs it to tell the echo of its own patch from an older event; without it, kopf now and
    then runs a handler again on a stale body. kopf guards its JSON patches with a ``test`` of the
    resourceVersion it last saw; the emulator answers a failed test with a 500, which kopf retries
    forever, so that test is dropped here (the patches apply last-write-wins).
    """

    async def _handle(self, request: kmock.Request) -> Any:
        if request.resource is not None and request.action in (kmock.action.CREATE, kmock.action.UPDATE):
            version = str(next(_versions))
            if isinstance(request.data, dict):
                request.data.setdefault("metadata", {})["resourceVersion"] = version
            elif isinstance(request.data, list):
                request.data[:] = [
                    op
                    for op in request.data
                    if not (op.get("op") == "test" and op.get("path") == "/metadata/resourceVersion")
                ]
                request.data.append({"op": "add", "path": "/metadata/resourceVersion", "value": version})
        elif request.resource is not None and request.action == kmock.action.DELETE and request.name:
            key = (request.resource, request.namespace, request.name)
            if key in self.objects and not self.objects[key].deleted:  # marking for deletion is a write too
                self.objects[key].patch({"metadata": {"resourceVersion": str(next(_versions))}})
        return await super()._handle(request)


class Emulator(threading.Thread):
    """kmock's KubernetesEmulator with the CRDs, served from a thread of its own."""

    def __init__(self) -> None:
        super().__init__(name="kmock", daemon=True)
        self.started = threading.Event()
        self.k8s: kmock.KubernetesEmulator
        self.url = ""

    def run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        async with VersionedEmulator() as k8s, kmock.Server(k8s) as server:
            k8s.resources.load_bundled()  # core v1 (secrets, events, namespaces) and API discovery
            for resource, info in crd_resources().items():
                k8s.resources[resource] = info
            self.k8s, self.url = k8s, str(server.url).rstrip("/")
            self._loop = asyncio.get_running_loop()
            self._halt = asyncio.Event()
            self.started.set()
            await self._halt.wait()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._halt.set)
        self.join(10)


class Cluster:
    """Talks to the emulator over HTTP as kubectl does, and reads its stored objects for assertions."""

    def __init__(self, emulator: Emulator, session: aiohttp.ClientSession) -> None:
        self.k8s = emulator.k8s
        self.url = emulator.url
        self.session = session

    @staticmethod
    def _path(kind: str, name: str | None = None) -> str:
        base = f"/apis/{GROUP_VERSION}/{PLURALS[kind]}"
        return f"{base}/{name}" if name else base

    async def _send(self, method: str, path: str, body: Any = None) -> Any:
        async with self.session.request(method, self.url + path, json=body) as response:
            assert response.status < 300, f"{method} {path} -> {response.status}: {await response.text()}"
            return await response.json()

    async def create(self, kind: str, name: str, spec: dict[str, Any]) -> None:
        meta = {"name": name, "uid": f"uid-{next(_uids)}", "generation": 1}
        body = {"apiVersion": GROUP_VERSION, "kind": kind, "metadata": meta, "spec": spec}
        await self._send("POST", self._path(kind), body)

    async def update(self, kind: str, name: str, spec: dict[str, Any]) -> int:
        """Replace the spec (keys set to None are removed); returns the new generation."""
        generation = int(self.get(kind, name)["metadata"]["generation"]) + 1
        await self._send(
            "PATCH", self._path(kind, name), {"metadata": {"generation": generation}, "spec": spec}
        )
        return generation

    async def delete(self, kind: str, name: str) -> None:
        await self._send("DELETE", self._path(kind, name))

    async def create_secret(self, namespace: str, name: str, data: dict[str, str], **meta: Any) -> None:
        encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace, **meta},
        }
        await self._send("POST", f"/api/v1/namespaces/{namespace}/secrets", {**body, "data": encoded})

    async def update_secret(self, namespace: str, name: str, data: dict[str, str]) -> None:
        """Replace the Secret's values, as ``kubectl apply`` of a changed Secret would."""
        encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        await self._send("PATCH", f"/api/v1/namespaces/{namespace}/secrets/{name}", {"data": encoded})

    async def delete_secret(self, namespace: str, name: str) -> None:
        await self._send("DELETE", f"/api/v1/namespaces/{namespace}/secrets/{name}")

    def get(self, kind: str, name: str) -> dict[str, Any]:
        obj = self.k8s.objects[_resource(kind), None, name]
        assert not obj.deleted, f"{kind} {name} is deleted"
        return _plain(obj.raw)

    def exists(self, kind: str, name: str) -> bool:
        key = (_resource(kind), None, name)
        return key in self.k8s.objects and not self.k8s.objects[key].deleted

    def ready(self, kind: str, name: str) -> dict[str, Any]:
        """The object's Ready condition, or an empty dict while it has none."""
        conditions = (self.get(kind, name).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Ready"), {})

    async def ready_because(self, kind: str, name: str, reason: str) -> dict[str, Any]:
        """Wait until the Ready condition of the object carries ``reason``; returns the condition."""

        def check() -> dict[str, Any] | None:
            condition = self.ready(kind, name)
            return condition if condition.get("reason") == reason else None

        found: dict[str, Any] = await eventually(check, what=f"Ready reason {reason} on {kind} {name}")
        return found

    def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        key = (SECRETS, namespace, name)
        if key not in self.k8s.objects or self.k8s.objects[key].deleted:
            return None
        return _plain(self.k8s.objects[key].raw)

    def secret_key(self, namespace: str, name: str) -> str | None:
        secret = self.secret(namespace, name)
        encoded = (secret or {}).get("data", {}).get("api-key")
        return base64.b64decode(encoded).decode() if encoded else None

    def requests(self, method: str, path_part: str) -> list[Any]:
        return [r for r in list(self.k8s) if r.method == method and path_part in r.url.path]

    def events(self, reason: str) -> list[dict[str, Any]]:
        """Events posted by the operator (the emulator keeps one per name, so read the requests)."""
        return [r.data for r in self.requests("POST", "/events") if r.data.get("reason") == reason]


def _resource(kind: str) -> kmock.resource:
    return kmock.resource(f"{GROUP_VERSION}/{PLURALS[kind]}")


def _plain(value: Any) -> Any:
    if isinstance(value, dict) or hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


async def eventually(check: Callable[[], Any], within: float = 20.0, what: str = "condition") -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(AssertionError, KeyError):
            last = check()
            if asyncio.iscoroutine(last):
                last = await last
            if last:
                return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


class RunningOperator(threading.Thread):
    """The operator on a thread and event loop of its own, as if it were another process.

    It opens its own connection pool to the test's database; the test keeps its own for assertions.
    """

    def __init__(
        self, cluster: Cluster, db_urls: tuple[str, str], options: OperatorOptions, **kwargs: Any
    ) -> None:
        super().__init__(name="operator", daemon=True)
        self.cluster = cluster
        self.app_url = db_urls[0]
        self.owner_url = db_urls[1].replace("+psycopg", "")
        self.options = options
        self.kwargs = kwargs
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._operate())
        except BaseException as exc:
            self.error = exc

    async def _operate(self) -> None:
        url = self.cluster.url

        def login(**_: Any) -> kopf.ConnectionInfo:
            return kopf.ConnectionInfo(server=url, insecure=True, scheme="Bearer", token="test")

        api = kubernetes.client.ApiClient(kubernetes.client.Configuration(host=url))
        db = Database(self.app_url, pool_size=4)
        self._stop_flag = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        try:
            await operate(
                db,
                kubernetes.client.CoreV1Api(api),
                self.options,
                login=login,
                stop_flag=self._stop_flag,
                ready=self.ready,
                **self.kwargs,
            )
        finally:
            await db.close()
            api.close()

    def stop(self) -> None:
        """Stop as on SIGTERM and wait for kopf's graceful shutdown, the path a real operator takes.

        Not cut short by cancelling kopf: a cancellation that lands while a watcher closes its
        per-object workers can leave that watcher waiting for ever (kopf 1.45), which an operator
        stopped by a signal never meets. The graceful stop takes hundredths of a second, up to
        5 s on a loaded machine (kopf's wait for tasks spawned late).
        """
        if (loop := self._loop) is not None:
            loop.call_soon_threadsafe(self._stop_flag.set)
        self.join(15)

    def where(self) -> str:
        """The operator thread's stack and that of every task left on its loop (a failure's message)."""
        lines = traceback.format_stack(sys._current_frames()[self.ident or 0])
        for task in asyncio.all_tasks(self._loop) if self._loop is not None else ():
            out = io.StringIO()
            task.print_stack(file=out)
            lines.append(f"\n{task!r}\n{out.getvalue()}")
        return "".join(lines)

    def sql(self, statement: str, **params: Any) -> list[tuple[Any, ...]]:
        """Change the database behind the operator's back, as a person with psql would."""
        with psycopg.connect(self.owner_url, autocommit=True) as conn:
            cursor = conn.execute(statement, params)
            return cursor.fetchall() if cursor.description else []


@contextlib.asynccontextmanager
async def running_operator(
    cluster: Cluster, db_urls: tuple[str, str], options: OperatorOptions = OPTIONS, **kwargs: Any
) -> AsyncIterator[RunningOperator]:
    operator = RunningOperator(cluster, db_urls, options, **kwargs)
    operator.start()
    try:
        started = await asyncio.to_thread(operator.ready.wait, 15)
        assert started, f"the operator did not start: {operator.error!r}"
        yield operator
    finally:
        await asyncio.to_thread(operator.stop)
        assert not operator.is_alive(), "the operator did not stop:\n" + operator.where()
    assert operator.error is None, f"the operator failed: {operator.error!r}"
