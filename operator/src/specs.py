"""The ``spec`` of Space, User and ApiKey objects, parsed and checked as the CRDs describe them.

The API server enforces the CRD schemas in a cluster; ``memory-mcp apply`` has no API server, so
both paths parse through here. Every error names the field (``spec.grants[1].access``) and the
defaults are the CRDs' defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memory_mcp.store import validation
from memory_mcp.store.access import Role, parse_role
from memory_mcp.store.apikeys import GrantSpec
from memory_mcp.store.errors import ValidationError

from .secrets import SecretRef

GROUP = "memory-mcp.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
DELETION_POLICIES = ("Retain", "Delete")
# secretRef.name may be a DNS subdomain, like every Secret name.
_SUBDOMAIN_MAX = 253


def _mapping(value: object, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValidationError(field, "must be an object")
    return value


def _string(spec: Mapping[str, Any], key: str, *, required: bool = False, default: str = "") -> str:
    value = spec.get(key)
    if value is None:
        if required:
            raise ValidationError(f"spec.{key}", "is required")
        return default
    if not isinstance(value, str):
        raise ValidationError(f"spec.{key}", f"must be a string, got {type(value).__name__}")
    return value


def _count(value: object, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(field, f"must be an integer >= 0, got {value!r}")
    return value


def _rfc3339(value: object, field: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):  # YAML loaders turn unquoted timestamps into datetimes
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ValidationError(field, f"must be an RFC 3339 date-time, got {value!r}") from None
    else:
        raise ValidationError(field, f"must be an RFC 3339 date-time, got {value!r}")
    if parsed.tzinfo is None:
        raise ValidationError(field, "must carry a time zone (for example a trailing Z for UTC)")
    return parsed.astimezone(UTC)


def _dns_subdomain(value: object, field: str) -> str:
    if not isinstance(value, str) or not value or len(value) > _SUBDOMAIN_MAX:
        raise ValidationError(field, "must be a DNS subdomain name of at most 253 characters")
    for label in value.split("."):
        validation.object_name(label, field)
    return value


@dataclass(frozen=True)
class SpaceSpec:
    display_name: str
    description: str
    deletion_policy: str
    max_memories: int | None
    max_documents: int | None

    @classmethod
    def parse(cls, spec: object) -> SpaceSpec:
        spec = _mapping(spec, "spec")
        display_name = _string(spec, "displayName", required=True)
        if not display_name.strip():
            raise ValidationError("spec.displayName", "must not be blank")
        if len(display_name) > 200:
            raise ValidationError("spec.displayName", "must be at most 200 characters")
        description = _string(spec, "description")
        if len(description) > 2000:
            raise ValidationError("spec.description", "must be at most 2000 characters")
        policy = _string(spec, "deletionPolicy", default="Retain")
        if policy not in DELETION_POLICIES:
            raise ValidationError("spec.deletionPolicy", f"must be 'Retain' or 'Delete', got {policy!r}")
        quotas = _mapping(spec.get("quotas") or {}, "spec.quotas")
        max_memories = _count(quotas.get("maxMemories"), "spec.quotas.maxMemories")
        max_documents = _count(quotas.get("maxDocuments"), "spec.quotas.maxDocuments")
        if "quotas" in spec and max_memories is None and max_documents is None:
            raise ValidationError("spec.quotas", "must set maxMemories, maxDocuments or both")
        return cls(display_name, description, policy, max_memories, max_documents)


@dataclass(frozen=True)
class UserSpec:
    email: str
    display_name: str
    role: Role
    active: bool

    @classmethod
    def parse(cls, spec: object) -> UserSpec:
        spec = _mapping(spec, "spec")
        email = validation.email(_string(spec, "email", required=True), "spec.email")
        display_name = _string(spec, "displayName", required=True)
        validation.non_empty(display_name, "spec.displayName")
        role = parse_role(_string(spec, "role", default=Role.READER.value), "spec.role")
        active = spec.get("active", True)
        if not isinstance(active, bool):
            raise ValidationError("spec.active", f"must be true or false, got {active!r}")
        return cls(email, display_name.strip(), role, active)


@dataclass(frozen=True)
class ApiKeySpec:
    user: str
    grants: tuple[GrantSpec, ...]
    default_space: str | None
    secret_ref: SecretRef
    expires_at: datetime | None
    rotation_generation: int

    @classmethod
    def parse(cls, spec: object) -> ApiKeySpec:
        spec = _mapping(spec, "spec")
        user = validation.object_name(_string(spec, "user", required=True), "spec.user")
        raw_grants = spec.get("grants")
        if not isinstance(raw_grants, list) or not raw_grants:
            raise ValidationError("spec.grants", "must list at least one {space, access} grant")
        grants: list[GrantSpec] = []
        for i, item in enumerate(raw_grants):
            grant = _mapping(item, f"spec.grants[{i}]")
            for key in ("space", "access"):
                if not isinstance(grant.get(key), str):
                    raise ValidationError(f"spec.grants[{i}].{key}", "is required and must be a string")
            try:
                parsed = GrantSpec.parse(grant["space"], grant["access"], i)
            except ValidationError as exc:
                raise ValidationError(f"spec.{exc.field}", exc.message) from None
            if any(g.space == parsed.space for g in grants):
                raise ValidationError(
                    f"spec.grants[{i}].space", f"'{parsed.space}' is granted twice; grant each space once"
                )
            grants.append(parsed)
        default_space = spec.get("defaultSpace")
        if default_space is not None:
            default_space = validation.space_key(default_space, "spec.defaultSpace")
            if all(g.space != default_space for g in grants):
                raise ValidationError(
                    "spec.defaultSpace", f"'{default_space}' must be one of the granted spaces"
                )
        ref = _mapping(spec.get("secretRef"), "spec.secretRef")
        secret_ref = SecretRef(
            namespace=validation.object_name(ref.get("namespace", ""), "spec.secretRef.namespace"),
            name=_dns_subdomain(ref.get("name"), "spec.secretRef.name"),
        )
        rotation = _count(spec.get("rotationGeneration"), "spec.rotationGeneration") or 0
        return cls(
            user=user,
            grants=tuple(grants),
            default_space=default_space,
            secret_ref=secret_ref,
            expires_at=_rfc3339(spec.get("expiresAt"), "spec.expiresAt"),
            rotation_generation=rotation,
        )
