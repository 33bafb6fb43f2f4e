"""What one reconcile found and did, in the shape a Ready condition and an Event need."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memory_mcp.store.errors import ValidationError

RECONCILED = "Reconciled"
INVALID_SPEC = "InvalidSpec"
SPACE_NOT_FOUND = "SpaceNotFound"
USER_NOT_FOUND = "UserNotFound"
CONFLICT = "Conflict"
DELETED = "Deleted"
RETAINED = "Retained"
REVOKED = "Revoked"
WEBHOOK_ADDRESS_REFUSED = "WebhookAddressRefused"
WEBHOOK_SECRET_INVALID = "WebhookSecretInvalid"
WEBHOOKS_NOT_APPLIED = "WebhooksNotApplied"


@dataclass(frozen=True)
class Outcome:
    """The result of reconciling one object.

    ``reason`` is one CamelCase word, ``message`` a sentence for people. ``changes`` lists what
    this run changed (empty when the database already matched, so a second run reports nothing).
    ``retry`` marks a wait on something that may appear later (a Space or User not declared yet).
    ``new_key`` is the plaintext of a key issued by this run, shown once. ``status`` carries the
    kind's own status fields (``keyPrefix``, ``memoryCount``...).
    """

    ready: bool
    reason: str
    message: str
    changes: tuple[str, ...] = ()
    retry: bool = False
    new_key: str | None = None
    status: Mapping[str, Any] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    @classmethod
    def invalid(cls, exc: ValidationError) -> Outcome:
        return cls(False, INVALID_SPEC, str(exc))  # every problem of the spec, each with its field
