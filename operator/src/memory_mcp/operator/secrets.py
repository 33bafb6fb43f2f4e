"""Where generated API keys go, and where declared webhook secrets come from.

The ApiKey reconciler writes keys through :class:`SecretStore`. The operator's implementation
keeps each key in a Kubernetes Secret (``kube_secrets.py``); ``memory-mcp apply`` keeps them in
memory and prints them once. The database only ever sees a key's hash, so this store is the one
place a key's plaintext lives.

The Space reconciler reads webhook signing secrets through :class:`SecretReader`: Secrets that
people (or their secret managers) own; the operator only reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class SecretRef:
    """The Secret an ApiKey's key is written to."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class SecretKeyRef:
    """One value (``key``) of a Secret, such as a webhook's signing secret."""

    namespace: str
    name: str
    key: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} (key {self.key})"


@dataclass(frozen=True)
class StoredKey:
    """A key as the secret store holds it, with the declared rotation generation it was made for."""

    plaintext: str
    rotation_generation: int
    generated_at: datetime | None = None


class SecretStoreError(Exception):
    """The store refuses or cannot serve a Secret; ``reason`` is a CamelCase word for the status."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class SecretStore(Protocol):
    """Keeps the plaintext of generated keys for one owner (an ApiKey)."""

    @property
    def holds_keys(self) -> bool:
        """True when a key absent from the store is lost (so a new one must be issued).

        False for a store that only sees the keys it generates in this run (``apply``): the person
        who ran it earlier holds the key, so an absent key is not a reason to issue another.
        """
        ...

    async def read(self, ref: SecretRef) -> StoredKey | None:
        """The key held at ``ref``, or None. Raises :class:`SecretStoreError` for a foreign Secret."""
        ...

    async def write(self, ref: SecretRef, key: StoredKey) -> None:
        """Create or replace the key at ``ref``."""
        ...

    async def delete(self, ref: SecretRef) -> bool:
        """Remove the key at ``ref`` if this store manages it; returns True if something was removed."""
        ...


class SecretReader(Protocol):
    """Reads values of Secrets that belong to others (never writes them)."""

    async def read_value(self, ref: SecretKeyRef) -> str:
        """The value at ``ref``; raises :class:`SecretStoreError` (``SecretNotFound``,
        ``SecretKeyNotFound``, ``SecretForbidden``...) when there is none to read."""
        ...
