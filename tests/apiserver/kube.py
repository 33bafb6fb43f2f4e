"""A small asynchronous client of the real API server, as kubectl would talk to it, plus waiting."""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
from collections.abc import Callable
from typing import Any

import aiohttp

GROUP_VERSION = "memory-mcp.io/v1alpha1"
PLURALS = {"Space": "spaces", "User": "users", "ApiKey": "apikeys"}
_BUILT_IN = {
    ("v1", "Namespace"): "/api/v1/namespaces",
    ("v1", "ServiceAccount"): "/api/v1/namespaces/{namespace}/serviceaccounts",
    ("v1", "Secret"): "/api/v1/namespaces/{namespace}/secrets",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): (
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
    ),
    ("rbac.authorization.k8s.io/v1", "Role"): (
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles"
    ),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): (
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings"
    ),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): (
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    ),
}


class ApiError(Exception):
    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        super().__init__(f"{method} {path} -> {status}: {body}")
        self.status, self.body = status, body


def collection_path(manifest: dict[str, Any]) -> str:
    """Where a manifest of a built-in kind or of our CRDs is POSTed."""
    api_version, kind = manifest["apiVersion"], manifest["kind"]
    if api_version == GROUP_VERSION:
        return f"/apis/{GROUP_VERSION}/{PLURALS[kind]}"
    namespace = manifest["metadata"].get("namespace", "")
    return _BUILT_IN[api_version, kind].format(namespace=namespace)


class Kube:
    """Requests to the API server with one identity's bearer token, over TLS checked against the CA."""

    def __init__(self, url: str, token: str, context: ssl.SSLContext) -> None:
        self.url = url
        self.session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {token}"},
            connector=aiohttp.TCPConnector(ssl=context),
            timeout=aiohttp.ClientTimeout(total=30),
        )

    async def close(self) -> None:
        await self.session.close()

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> Any:
        async with self.session.request(
            method,
            self.url + path,
            json=body,
            params=params,
            headers={"Content-Type": content_type} if body is not None else None,
        ) as response:
            data = await response.json(content_type=None) if response.content_length != 0 else None
            if response.status >= 300:
                raise ApiError(method, path, response.status, data)
            return data

    async def status_of(self, method: str, path: str, body: Any = None) -> int:
        """The HTTP status of a request (for what an identity may and may not do)."""
        try:
            await self.request(method, path, body)
        except ApiError as exc:
            return exc.status
        return 200

    # --- generic -------------------------------------------------------------------------------

    async def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = await self.request("POST", collection_path(manifest), manifest)
        return created

    async def get_path(self, path: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = await self.request("GET", path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return found

    # --- our custom resources ------------------------------------------------------------------

    @staticmethod
    def path(kind: str, name: str | None = None) -> str:
        base = f"/apis/{GROUP_VERSION}/{PLURALS[kind]}"
        return f"{base}/{name}" if name else base

    async def create_object(self, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return await self.create(
            {"apiVersion": GROUP_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}
        )

    async def get(self, kind: str, name: str) -> dict[str, Any] | None:
        return await self.get_path(self.path(kind, name))

    async def update_spec(self, kind: str, name: str, spec: dict[str, Any]) -> int:
        """Merge ``spec`` into the object's spec (None removes a key); returns the new generation."""
        patched = await self.request(
            "PATCH", self.path(kind, name), {"spec": spec}, content_type="application/merge-patch+json"
        )
        return int(patched["metadata"]["generation"])

    async def delete(self, kind: str, name: str) -> None:
        await self.request("DELETE", self.path(kind, name))

    async def ready(self, kind: str, name: str) -> dict[str, Any]:
        """The object's Ready condition, or an empty dict while it has none (or no object)."""
        obj = await self.get(kind, name)
        conditions = ((obj or {}).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Ready"), {})

    # --- Secrets, Events -----------------------------------------------------------------------

    @staticmethod
    def secret_path(namespace: str, name: str = "") -> str:
        return f"/api/v1/namespaces/{namespace}/secrets" + (f"/{name}" if name else "")

    async def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.get_path(self.secret_path(namespace, name))

    async def secret_key(self, namespace: str, name: str) -> str | None:
        encoded = ((await self.secret(namespace, name)) or {}).get("data", {}).get("api-key")
        return base64.b64decode(encoded).decode() if encoded else None

    async def events(self, kind: str, name: str) -> list[dict[str, Any]]:
        """Events about one of our objects, in any namespace."""
        found = await self.request(
            "GET",
            "/api/v1/events",
            params={"fieldSelector": f"involvedObject.kind={kind},involvedObject.name={name}"},
        )
        items: list[dict[str, Any]] = found["items"]
        return items


async def wait_for(
    check: Callable[[], Any], within: float = 30.0, what: str = "condition", interval: float = 0.02
) -> tuple[Any, float]:
    """Poll ``check`` (sync or async) until it returns something truthy.

    Returns that value and the seconds it took; fails after ``within`` seconds. Exceptions other than
    assertion errors propagate: the API server is real, so an error answer is a finding.
    """
    start = time.monotonic()
    deadline = start + within
    last: Any = None
    while True:
        try:
            last = check()
            if asyncio.iscoroutine(last):
                last = await last
        except AssertionError as exc:
            last = exc
        else:
            if last:
                return last, time.monotonic() - start
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:.0f} s waiting for {what} (last: {last!r})")
        await asyncio.sleep(interval)
