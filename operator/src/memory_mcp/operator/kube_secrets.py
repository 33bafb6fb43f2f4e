"""The operator's secret store: each ApiKey's key lives in the Kubernetes Secret its secretRef names.

The Secret is owned by the ApiKey (ownerReferences), labelled ``app.kubernetes.io/managed-by:
memory-mcp`` and annotated with the ApiKey's name and the rotation generation of the key it holds.
A Secret that exists without those marks is someone else's and is never overwritten.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from kubernetes.client import ApiException

from .secrets import SecretKeyRef, SecretRef, SecretStoreError, StoredKey

DATA_KEY = "api-key"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "memory-mcp"
API_KEY_ANNOTATION = "memory-mcp.io/api-key"
GENERATION_ANNOTATION = "memory-mcp.io/rotation-generation"
GENERATED_AT_ANNOTATION = "memory-mcp.io/generated-at"

T = TypeVar("T")


@dataclass(frozen=True)
class Owner:
    """The ApiKey object a Secret belongs to."""

    api_version: str
    kind: str
    name: str
    uid: str | None

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> Owner:
        meta = body.get("metadata", {})
        return cls(str(body.get("apiVersion")), str(body.get("kind")), str(meta.get("name")), meta.get("uid"))

    def reference(self) -> dict[str, Any]:
        ref: dict[str, Any] = {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "controller": True,
            "blockOwnerDeletion": True,
        }
        if self.uid:
            ref["uid"] = self.uid
        return ref


class KubernetesSecretStore:
    """Reads and writes one ApiKey's Secret through a ``kubernetes`` ``CoreV1Api``.

    The official client is synchronous; calls run in a worker thread so the operator's event loop
    keeps serving other objects. ``allowed_namespaces`` (None: any) mirrors the namespaces the
    operator was granted Secret access in.
    """

    holds_keys = True

    def __init__(self, core: Any, owner: Owner, allowed_namespaces: frozenset[str] | None = None) -> None:
        self._core = core
        self._owner = owner
        self._allowed = allowed_namespaces

    async def read(self, ref: SecretRef) -> StoredKey | None:
        secret = await self._fetch(ref)
        if secret is None:
            return None
        self._check_owned(ref, secret)
        encoded = (secret.data or {}).get(DATA_KEY)
        if not encoded:
            return None
        try:
            plaintext = base64.b64decode(encoded, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        annotations = secret.metadata.annotations or {}
        return StoredKey(
            plaintext,
            _int(annotations.get(GENERATION_ANNOTATION)),
            _timestamp(annotations.get(GENERATED_AT_ANNOTATION)),
        )

    async def write(self, ref: SecretRef, key: StoredKey) -> None:
        annotations = {
            API_KEY_ANNOTATION: self._owner.name,
            GENERATION_ANNOTATION: str(key.rotation_generation),
        }
        if key.generated_at is not None:
            annotations[GENERATED_AT_ANNOTATION] = key.generated_at.strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": ref.name,
                "namespace": ref.namespace,
                "labels": {MANAGED_BY_LABEL: MANAGED_BY},
                "annotations": annotations,
                "ownerReferences": [self._owner.reference()],
            },
            "data": {DATA_KEY: base64.b64encode(key.plaintext.encode()).decode()},
        }
        existing = await self._fetch(ref)
        if existing is None:
            await _call(ref, "create", self._core.create_namespaced_secret, ref.namespace, body)
            return
        self._check_owned(ref, existing)
        await _call(ref, "patch", self._core.patch_namespaced_secret, ref.name, ref.namespace, body)

    async def delete(self, ref: SecretRef) -> bool:
        secret = await self._fetch(ref)
        if secret is None or not self._owns(secret):
            return False
        try:
            await _call(ref, "delete", self._core.delete_namespaced_secret, ref.name, ref.namespace)
        except SecretStoreError as exc:
            if exc.reason == "SecretNotFound":
                return False
            raise
        return True

    async def _fetch(self, ref: SecretRef) -> Any:
        _check_namespace(self._allowed, ref, "write")
        try:
            return await _call(ref, "read", self._core.read_namespaced_secret, ref.name, ref.namespace)
        except SecretStoreError as exc:
            if exc.reason == "SecretNotFound":
                return None
            raise

    def _owns(self, secret: Any) -> bool:
        meta = secret.metadata
        labels = meta.labels or {}
        annotations = meta.annotations or {}
        if (
            labels.get(MANAGED_BY_LABEL) != MANAGED_BY
            or annotations.get(API_KEY_ANNOTATION) != self._owner.name
        ):
            return False
        owners = [o for o in meta.owner_references or [] if o.kind == self._owner.kind]
        # A Secret left behind by an earlier ApiKey of the same name must not hand its key to this one.
        return not (self._owner.uid and owners and all(o.uid != self._owner.uid for o in owners))

    def _check_owned(self, ref: SecretRef, secret: Any) -> None:
        if not self._owns(secret):
            raise SecretStoreError(
                "SecretConflict",
                f"Secret {ref} exists but does not belong to ApiKey '{self._owner.name}'; it is left "
                "untouched. Delete it or point secretRef at another name.",
            )


class KubernetesSecretReader:
    """Reads one value of a Secret someone else owns (a webhook's signing secret): ``get`` only,
    the verb the operator already holds for ApiKey Secrets, in the same namespaces."""

    def __init__(self, core: Any, allowed_namespaces: frozenset[str] | None = None) -> None:
        self._core = core
        self._allowed = allowed_namespaces

    async def read_value(self, ref: SecretKeyRef) -> str:
        where = SecretRef(ref.namespace, ref.name)
        _check_namespace(self._allowed, where, "read")
        secret = await _call(where, "read", self._core.read_namespaced_secret, ref.name, ref.namespace)
        encoded = (secret.data or {}).get(ref.key)
        if encoded is None:
            keys = ", ".join(sorted(secret.data or {})) or "none"
            raise SecretStoreError(
                "SecretKeyNotFound", f"Secret {where} has no key '{ref.key}' (its keys: {keys})."
            )
        try:
            return base64.b64decode(encoded, validate=True).decode().strip()
        except (binascii.Error, UnicodeDecodeError):
            raise SecretStoreError("SecretInvalid", f"Secret {ref} does not hold text.") from None


def _check_namespace(allowed: frozenset[str] | None, ref: SecretRef, verb: str) -> None:
    if allowed is not None and ref.namespace not in allowed:
        raise SecretStoreError(
            "SecretNamespaceNotAllowed",
            f"The operator may {verb} Secrets only in {', '.join(sorted(allowed)) or 'no namespace'}, "
            f"not in '{ref.namespace}'; point secretRef at one of those namespaces.",
        )


async def _call(ref: SecretRef, verb: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn`` in a worker thread (the official client is synchronous); API errors as refusals."""
    try:
        return await asyncio.to_thread(fn, *args)
    except ApiException as exc:
        raise _refusal(ref, verb, exc) from None


def _refusal(ref: SecretRef, verb: str, exc: ApiException) -> SecretStoreError:
    if exc.status == 404 and verb == "create":
        return SecretStoreError(
            "SecretNamespaceNotFound", f"Namespace '{ref.namespace}' does not exist; create it first."
        )
    if exc.status == 404:
        return SecretStoreError("SecretNotFound", f"Secret {ref} does not exist.")
    if exc.status == 403:
        return SecretStoreError(
            "SecretForbidden",
            f"The operator is not allowed to {verb} Secrets in namespace '{ref.namespace}'; grant it "
            "there (operator.secretNamespaces in the Helm chart).",
        )
    if exc.status == 409:
        return SecretStoreError("SecretConflict", f"Secret {ref} changed while it was written; retrying.")
    return SecretStoreError("SecretError", f"Could not {verb} Secret {ref}: HTTP {exc.status} {exc.reason}.")


def _int(value: object) -> int:
    try:
        return max(int(str(value)), 0)
    except ValueError:
        return 0


def _timestamp(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
