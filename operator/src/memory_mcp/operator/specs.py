"""The ``spec`` of Space, User and ApiKey objects, parsed and checked as the CRDs describe them.

The API server enforces the CRD schemas in a cluster; ``memory-mcp apply`` has no API server, so
both paths parse through here. A spec is checked whole: every problem is reported, each naming its
field (``spec.grants[1].access``), and fields the CRD does not declare are refused (an API server
would prune them silently, so a misspelt field would quietly do nothing). The defaults are the
CRDs' defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from memory_mcp.store import validation, webhooks
from memory_mcp.store.access import Role, parse_role
from memory_mcp.store.apikeys import GrantSpec
from memory_mcp.store.errors import ValidationError
from memory_mcp.store.ratelimit import RateLimit
from memory_mcp.store.spaces import WRITE_POLICIES

from .secrets import SecretKeyRef, SecretRef

GROUP = "memory-mcp.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
DELETION_POLICIES = ("Retain", "Delete")
# secretRef.name may be a DNS subdomain, like every Secret name.
_SUBDOMAIN_MAX = 253
# A key of a Secret's data (Kubernetes: letters, digits, '-', '_', '.'; at most 253).
_SECRET_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
T = TypeVar("T")


class SpecInvalid(ValidationError):
    """Every problem of one spec; ``field`` and ``message`` are the first's, ``problems`` all of them."""

    def __init__(self, problems: list[ValidationError]) -> None:
        super().__init__(problems[0].field, problems[0].message)
        self.problems = problems
        self.args = ("; ".join(f"{p.field}: {p.message}" for p in problems),)


def problems_of(exc: ValidationError) -> list[ValidationError]:
    """The problems one error stands for (a :class:`SpecInvalid` holds several)."""
    return exc.problems if isinstance(exc, SpecInvalid) else [exc]


class Checker:
    """Collects the problems of one spec instead of stopping at the first."""

    def __init__(self) -> None:
        self.problems: list[ValidationError] = []

    def field(self, check: Callable[[], T], default: T) -> T:
        """``check()``, or ``default`` with its problems recorded."""
        try:
            return check()
        except ValidationError as exc:
            self.problems.extend(problems_of(exc))
            return default

    def known_fields(self, value: Mapping[str, Any], allowed: Collection[str], path: str) -> None:
        for key in value:
            if key not in allowed:
                self.problems.append(
                    ValidationError(
                        f"{path}.{key}".lstrip("."),
                        f"unknown field ({path or 'an object'} has {', '.join(sorted(allowed))}); "
                        "a cluster would drop it silently, since CRDs prune unknown fields",
                    )
                )

    def mapping(self, value: object, path: str, allowed: Collection[str]) -> Mapping[str, Any]:
        """``value`` as a mapping with only ``allowed`` keys (an empty one, recorded, otherwise)."""
        if not isinstance(value, Mapping):
            self.problems.append(ValidationError(path, "must be an object"))
            return {}
        self.known_fields(value, allowed, path)
        return value

    def done(self) -> None:
        if self.problems:
            raise SpecInvalid(self.problems)


def _string(spec: Mapping[str, Any], key: str, *, required: bool = False, default: str = "") -> str:
    value = spec.get(key)
    if value is None:
        if required:
            raise ValidationError(f"spec.{key}", "is required")
        return default
    if not isinstance(value, str):
        raise ValidationError(f"spec.{key}", f"must be a string, got {type(value).__name__}")
    return value


def _count(value: object, field: str, most: int = validation.MAX_INTEGER_COLUMN) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise ValidationError(field, f"must be an integer from 0 to {most}, got {value!r}")
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


def _secret_data_key(value: object, field: str) -> str:
    if (
        not isinstance(value, str)
        or not value
        or len(value) > _SUBDOMAIN_MAX
        or not set(value) <= _SECRET_KEY_CHARS
    ):
        raise ValidationError(field, "must be a key of the Secret's data (letters, digits, '-', '_', '.')")
    return value


@dataclass(frozen=True)
class WebhookSpec:
    """One declared receiver of the space's events, and the Secret value that signs them."""

    url: str
    secret_ref: SecretKeyRef

    FIELDS = ("url", "secretRef")
    SECRET_REF_FIELDS = ("namespace", "name", "key")

    @classmethod
    def parse_all(cls, check: Checker, raw: object) -> tuple[WebhookSpec, ...]:
        if raw is None:
            return ()
        if not isinstance(raw, list) or len(raw) > webhooks.MAX_DECLARED:
            check.problems.append(
                ValidationError(
                    "spec.webhooks", f"must be a list of at most {webhooks.MAX_DECLARED} {{url, secretRef}}"
                )
            )
            return ()
        found: list[WebhookSpec] = []
        for i, item in enumerate(raw):
            path = f"spec.webhooks[{i}]"
            hook = check.mapping(item, path, cls.FIELDS)
            url = hook.get("url")
            if (
                not isinstance(url, str)
                or not url.startswith(("https://", "http://"))
                or len(url) > webhooks.MAX_URL
            ):
                check.problems.append(
                    ValidationError(
                        f"{path}.url", f"must be an https:// URL of at most {webhooks.MAX_URL} characters"
                    )
                )
                url = None
            elif any(w.url == url for w in found):
                check.problems.append(ValidationError(f"{path}.url", f"'{url}' is declared twice"))
                url = None
            secret_ref = cls._secret_ref(check, hook.get("secretRef"), f"{path}.secretRef")
            if url is not None:
                found.append(cls(url, secret_ref))
        return tuple(found)

    @classmethod
    def _secret_ref(cls, check: Checker, raw: object, path: str) -> SecretKeyRef:
        ref = check.mapping(raw, path, cls.SECRET_REF_FIELDS)
        return SecretKeyRef(
            namespace=check.field(
                lambda: validation.object_name(ref.get("namespace", ""), f"{path}.namespace"), ""
            ),
            name=check.field(lambda: _dns_subdomain(ref.get("name"), f"{path}.name"), ""),
            key=check.field(lambda: _secret_data_key(ref.get("key"), f"{path}.key"), ""),
        )


@dataclass(frozen=True)
class SpaceSpec:
    display_name: str
    description: str
    deletion_policy: str
    max_memories: int | None
    max_documents: int | None
    write_policy: str = "Direct"
    max_bytes: int | None = None
    # Limits of one uploaded file; None: the server's settings apply.
    max_pdf_pages: int | None = None
    max_media_seconds: int | None = None
    webhooks: tuple[WebhookSpec, ...] = ()

    FIELDS = ("displayName", "description", "deletionPolicy", "writePolicy", "quotas", "webhooks")
    QUOTA_FIELDS = ("maxMemories", "maxDocuments", "maxBytes", "maxPdfPages", "maxMediaSeconds")

    @classmethod
    def parse(cls, spec: object) -> SpaceSpec:
        check = Checker()
        spec = check.mapping(spec, "spec", cls.FIELDS)
        display_name = check.field(lambda: _display_name(spec), "")
        description = check.field(lambda: _description(spec), "")
        policy = check.field(lambda: _deletion_policy(spec), "Retain")
        quotas = check.mapping(spec.get("quotas") or {}, "spec.quotas", cls.QUOTA_FIELDS)
        max_memories = check.field(lambda: _count(quotas.get("maxMemories"), "spec.quotas.maxMemories"), None)
        max_documents = check.field(
            lambda: _count(quotas.get("maxDocuments"), "spec.quotas.maxDocuments"), None
        )
        max_bytes = check.field(
            lambda: _count(quotas.get("maxBytes"), "spec.quotas.maxBytes", validation.MAX_BIGINT_COLUMN), None
        )
        max_pdf_pages = check.field(
            lambda: validation.file_limit(quotas.get("maxPdfPages"), "spec.quotas.maxPdfPages"), None
        )
        max_media_seconds = check.field(
            lambda: validation.file_limit(quotas.get("maxMediaSeconds"), "spec.quotas.maxMediaSeconds"), None
        )
        if "quotas" in spec and not any(key in quotas for key in cls.QUOTA_FIELDS):
            check.problems.append(
                ValidationError("spec.quotas", f"must set at least one of {', '.join(cls.QUOTA_FIELDS)}")
            )
        write_policy = check.field(lambda: _write_policy(spec), "Direct")
        declared = WebhookSpec.parse_all(check, spec.get("webhooks"))
        check.done()
        return cls(
            display_name,
            description,
            policy,
            max_memories,
            max_documents,
            write_policy,
            max_bytes,
            max_pdf_pages,
            max_media_seconds,
            declared,
        )


def _display_name(spec: Mapping[str, Any]) -> str:
    display_name = _string(spec, "displayName", required=True)
    if not display_name.strip():
        raise ValidationError("spec.displayName", "must not be blank")
    if len(display_name) > 200:
        raise ValidationError("spec.displayName", "must be at most 200 characters")
    return display_name


def _description(spec: Mapping[str, Any]) -> str:
    description = _string(spec, "description")
    if len(description) > 2000:
        raise ValidationError("spec.description", "must be at most 2000 characters")
    return description


def _deletion_policy(spec: Mapping[str, Any]) -> str:
    policy = _string(spec, "deletionPolicy", default="Retain")
    if policy not in DELETION_POLICIES:
        raise ValidationError("spec.deletionPolicy", f"must be 'Retain' or 'Delete', got {policy!r}")
    return policy


def _write_policy(spec: Mapping[str, Any]) -> str:
    policy = _string(spec, "writePolicy", default="Direct")
    if policy not in WRITE_POLICIES:
        raise ValidationError("spec.writePolicy", f"must be 'Direct' or 'Review', got {policy!r}")
    return policy


@dataclass(frozen=True)
class UserSpec:
    email: str
    display_name: str
    role: Role
    active: bool

    FIELDS = ("email", "displayName", "role", "active")

    @classmethod
    def parse(cls, spec: object) -> UserSpec:
        check = Checker()
        spec = check.mapping(spec, "spec", cls.FIELDS)
        email = check.field(lambda: validation.email(_string(spec, "email", required=True), "spec.email"), "")
        display_name = check.field(
            lambda: validation.non_empty(_string(spec, "displayName", required=True), "spec.displayName"), ""
        )
        role = check.field(
            lambda: parse_role(_string(spec, "role", default=Role.READER.value), "spec.role"), Role.READER
        )
        active = spec.get("active", True)
        if not isinstance(active, bool):
            check.problems.append(ValidationError("spec.active", f"must be true or false, got {active!r}"))
        check.done()
        return cls(email, display_name.strip(), role, bool(active))


@dataclass(frozen=True)
class ApiKeySpec:
    user: str
    grants: tuple[GrantSpec, ...]
    default_space: str | None
    secret_ref: SecretRef
    expires_at: datetime | None
    rotation_generation: int
    rate_limit: RateLimit | None = None

    FIELDS = ("user", "grants", "defaultSpace", "secretRef", "expiresAt", "rotationGeneration", "rateLimit")
    GRANT_FIELDS = ("space", "access")
    SECRET_REF_FIELDS = ("namespace", "name")
    RATE_LIMIT_FIELDS = ("requestsPerMinute", "burst")

    @classmethod
    def parse(cls, spec: object) -> ApiKeySpec:
        check = Checker()
        spec = check.mapping(spec, "spec", cls.FIELDS)
        user = check.field(
            lambda: validation.object_name(_string(spec, "user", required=True), "spec.user"), ""
        )
        grants = cls._grants(check, spec.get("grants"))
        default_space = spec.get("defaultSpace")
        if default_space is not None:
            default_space = check.field(
                lambda: validation.space_key(default_space, "spec.defaultSpace"), None
            )
            if default_space is not None and grants and all(g.space != default_space for g in grants):
                check.problems.append(
                    ValidationError(
                        "spec.defaultSpace", f"'{default_space}' must be one of the granted spaces"
                    )
                )
        ref = check.mapping(spec.get("secretRef"), "spec.secretRef", cls.SECRET_REF_FIELDS)
        secret_ref = SecretRef(
            namespace=check.field(
                lambda: validation.object_name(ref.get("namespace", ""), "spec.secretRef.namespace"), ""
            ),
            name=check.field(lambda: _dns_subdomain(ref.get("name"), "spec.secretRef.name"), ""),
        )
        rotation: int | None = check.field(
            lambda: _count(
                spec.get("rotationGeneration"), "spec.rotationGeneration", validation.MAX_BIGINT_COLUMN
            ),
            None,
        )
        expires_at = check.field(lambda: _rfc3339(spec.get("expiresAt"), "spec.expiresAt"), None)
        rate_limit = None
        if spec.get("rateLimit") is not None:
            limit = check.mapping(spec["rateLimit"], "spec.rateLimit", cls.RATE_LIMIT_FIELDS)
            if limit and "requestsPerMinute" not in limit:
                check.problems.append(ValidationError("spec.rateLimit.requestsPerMinute", "is required"))
            elif limit:
                rate_limit = check.field(
                    lambda: RateLimit.parse(limit["requestsPerMinute"], limit.get("burst"), "spec.rateLimit"),
                    None,
                )
        check.done()
        return cls(
            user=user,
            grants=tuple(grants),
            default_space=default_space,
            secret_ref=secret_ref,
            expires_at=expires_at,
            rotation_generation=rotation or 0,
            rate_limit=rate_limit,
        )

    @classmethod
    def _grants(cls, check: Checker, raw: object) -> list[GrantSpec]:
        if not isinstance(raw, list) or not raw:
            check.problems.append(
                ValidationError("spec.grants", "must list at least one {space, access} grant")
            )
            return []
        grants: list[GrantSpec] = []
        for i, item in enumerate(raw):
            grant = check.mapping(item, f"spec.grants[{i}]", cls.GRANT_FIELDS)
            missing = [key for key in cls.GRANT_FIELDS if not isinstance(grant.get(key), str)]
            for key in missing:
                check.problems.append(
                    ValidationError(f"spec.grants[{i}].{key}", "is required and must be a string")
                )
            if missing:
                continue
            try:
                parsed = GrantSpec.parse(grant["space"], grant["access"], i)
            except ValidationError as exc:
                check.problems.append(ValidationError(f"spec.{exc.field}", exc.message))
                continue
            if any(g.space == parsed.space for g in grants):
                check.problems.append(
                    ValidationError(
                        f"spec.grants[{i}].space", f"'{parsed.space}' is granted twice; grant each space once"
                    )
                )
                continue
            grants.append(parsed)
        return grants
