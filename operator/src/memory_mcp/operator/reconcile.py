"""Reconcilers: make the database match a declared Space, User or ApiKey, and undo them on deletion.

Plain async functions over :class:`~memory_mcp.store.db.Database`, shared by the kopf handlers and
``memory-mcp apply``. Each is idempotent: a second run with the same spec changes nothing and
reports no changes. They return an :class:`Outcome` instead of raising for anything a person can
fix in the spec; unexpected failures (the database is down) propagate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from memory_mcp.store import apikeys, identity, keys, spaces, users, validation, webhooks
from memory_mcp.store.db import Database
from memory_mcp.store.errors import Conflict, NotFound, SpaceNotFound, ValidationError
from memory_mcp.store.models import User
from memory_mcp.store.ownership import ManagedElsewhere, Owner, owner_of

from .outcome import (
    CONFLICT,
    DELETED,
    RECONCILED,
    RETAINED,
    REVOKED,
    SPACE_NOT_FOUND,
    USER_NOT_FOUND,
    WEBHOOK_ADDRESS_REFUSED,
    WEBHOOK_SECRET_INVALID,
    WEBHOOKS_NOT_APPLIED,
    Outcome,
)
from .secrets import SecretReader, SecretStore, SecretStoreError, StoredKey
from .specs import ApiKeySpec, SpaceSpec, UserSpec, WebhookSpec

DEFAULT_ACTOR = "operator"
# How often one ApiKey reconcile reads and writes again when the key's row goes between the two.
_KEY_ATTEMPTS = 3


# How a column of `spaces` is named in a Space manifest, where that is not its camelCase.
_SPACE_FIELDS = {
    "max_memories": "quotas.maxMemories",
    "max_documents": "quotas.maxDocuments",
    "max_bytes": "quotas.maxBytes",
    "max_pdf_pages": "quotas.maxPdfPages",
    "max_media_seconds": "quotas.maxMediaSeconds",
}


def _shown(value: object) -> str:
    return "none" if value is None else repr(value) if isinstance(value, str) else str(value)


def _differences(before: Mapping[str, Any], after: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """``field 'old' -> 'new'`` for every setting that differs, in the manifest's field names."""
    changed = []
    for column, value in after.items():
        if before.get(column) != value:
            head, *rest = column.split("_")
            field = names.get(column, head + "".join(part.capitalize() for part in rest))
            changed.append(f"{field} {_shown(before.get(column))} -> {_shown(value)}")
    return ", ".join(changed)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


async def _managed_by_cli(db: Database, kind: str, name: str) -> Outcome | None:
    """A not-ready outcome when the command line made this object: a manifest never takes it over."""
    if await owner_of(db, kind, name) is not Owner.CLI:
        return None
    return Outcome(False, CONFLICT, f"{ManagedElsewhere(kind, name, Owner.CLI)}.")


async def _left_to_cli(db: Database, kind: str, name: str) -> Outcome | None:
    """A deleted object whose name the command line now manages: nothing to undo, say so."""
    if await owner_of(db, kind, name) is not Owner.CLI:
        return None
    return Outcome(
        True, DELETED, f"{kind.capitalize()} '{name}' is managed by the command line; left as it is."
    )


# --- Space --------------------------------------------------------------------------------------


async def _upsert_space(db: Database, name: str, wanted: SpaceSpec, actor: str) -> spaces.SpaceUpsert:
    """Write every declared setting of the space ``name``."""
    return await spaces.upsert_space(
        db,
        name,
        wanted.display_name,
        wanted.description,
        wanted.deletion_policy,
        wanted.max_memories,
        wanted.max_documents,
        actor=actor,
        write_policy=wanted.write_policy,
        max_bytes=wanted.max_bytes,
        max_pdf_pages=wanted.max_pdf_pages,
        max_media_seconds=wanted.max_media_seconds,
    )


# Waits that end when someone creates the Secret (often in the same `kubectl apply`): retried soon.
_SECRET_WAITS = frozenset({"SecretNotFound", "SecretKeyNotFound"})


@dataclass
class _Webhooks:
    """One reconcile of a space's declared webhooks: what changed, what was refused, the status."""

    changes: list[str] = field(default_factory=list)
    refusals: list[tuple[str, str]] = field(default_factory=list)  # (reason, message)
    status: list[dict[str, Any]] = field(default_factory=list)


async def _declared_secret(
    hook: WebhookSpec, secrets: SecretReader, allow_loopback: bool, path: str
) -> tuple[str, str] | str:
    """The webhook's signing secret, or why it cannot be used: (reason, message)."""
    try:
        await webhooks.check_receiver(hook.url, allow_loopback)
    except webhooks.ReceiverRefused as exc:
        return WEBHOOK_ADDRESS_REFUSED, f"{path}.url: {exc}"
    try:
        secret = await secrets.read_value(hook.secret_ref)
    except SecretStoreError as exc:
        return exc.reason, f"{path}.secretRef: {exc.message.rstrip('.')}"
    if problem := webhooks.secret_problem(secret):
        return WEBHOOK_SECRET_INVALID, f"{path}.secretRef: Secret {hook.secret_ref} is refused: {problem}"
    return secret


async def _reconcile_webhooks(
    db: Database,
    name: str,
    declared: tuple[WebhookSpec, ...],
    secrets: SecretReader | None,
    allow_loopback: bool,
    actor: str,
) -> _Webhooks:
    """Make the space's resource-managed webhooks match ``declared``.

    A declared webhook whose URL is refused or whose Secret is missing or malformed gets no row;
    one that had a row keeps it as it was (deliveries go on with the last good secret) until the
    spec or the Secret is fixed. Webhooks added by the command line are left alone.
    """
    run = _Webhooks()
    if secrets is None:  # memory-mcp apply: no cluster, so no Secrets to read the signing keys from
        if declared:
            run.refusals.append(
                (
                    WEBHOOKS_NOT_APPLIED,
                    "spec.webhooks needs the operator (their signing secrets are Kubernetes Secrets); "
                    f"without a cluster add them with: memory-mcp webhook add {name} URL",
                )
            )
        return run
    wanted: dict[str, str] = {}
    refused: dict[str, tuple[str, str]] = {}
    for i, hook in enumerate(declared):
        found = await _declared_secret(hook, secrets, allow_loopback, f"spec.webhooks[{i}]")
        if isinstance(found, str):
            wanted[hook.url] = found
        else:
            refused[hook.url] = found
    done = await webhooks.declare_webhooks(db, name, wanted, frozenset(refused), actor)
    run.changes += [f"added webhook {url}" for url in done.added]
    run.changes += [f"changed the signing secret of webhook {url}" for url in done.rekeyed]
    run.changes += [f"removed webhook {url}" for url in done.removed]
    for url in done.held_by_cli:
        refused[url] = (
            CONFLICT,
            f"webhook {url} was added by the command line; remove it there (memory-mcp webhook remove "
            f"{name} {url}) for this resource to manage it",
        )
    dead = {h.url: h.dead_letters for h in await webhooks.list_webhooks(db, name)}
    for hook in declared:
        if hook.url in refused:
            reason, message = refused[hook.url]
            run.refusals.append((reason, message))
            run.status.append({"url": hook.url, "state": "Refused", "reason": reason, "message": message})
        else:
            run.status.append({"url": hook.url, "state": "Active", "deadLetters": dead.get(hook.url, 0)})
    return run


async def reconcile_space(
    db: Database,
    name: str,
    spec: Mapping[str, Any],
    actor: str = DEFAULT_ACTOR,
    *,
    webhook_secrets: SecretReader | None = None,
    allow_loopback_receivers: bool = False,
) -> Outcome:
    """Create, update or re-attach the space named ``name`` (its key) as ``spec`` declares, with
    its declared webhooks (their signing secrets read through ``webhook_secrets``; None, as in
    ``memory-mcp apply``, leaves the space's webhooks as they are)."""
    try:
        validation.space_key(name, "metadata.name")
        wanted = SpaceSpec.parse(spec)
    except ValidationError as exc:
        return Outcome.invalid(exc)
    if refused := await _managed_by_cli(db, "space", name):
        return refused
    upserted = await _upsert_space(db, name, wanted, actor)
    counts = await spaces.space_counts(db, name)
    memories, documents = counts or (0, 0)
    changes: tuple[str, ...] = ()
    if upserted.changed and upserted.before is not None:
        changes = (f"updated space '{name}': {_differences(upserted.before, upserted.after, _SPACE_FIELDS)}",)
    elif upserted.changed and (memories or documents):
        changes = (
            f"restored retained space '{name}' with {_plural(memories, 'memory')} "
            f"and {_plural(documents, 'document')}",
        )
    elif upserted.changed:
        changes = (f"created space '{name}'",)
    hooks = await _reconcile_webhooks(
        db, name, wanted.webhooks, webhook_secrets, allow_loopback_receivers, actor
    )
    status: dict[str, Any] = {"memoryCount": memories, "documentCount": documents}
    if webhook_secrets is not None:
        status["webhooks"] = hooks.status
    changes += tuple(hooks.changes)
    if hooks.refusals:
        reasons = [reason for reason, _ in hooks.refusals]
        return Outcome(
            False,
            reasons[0],
            f"Space '{name}' is in place, but not every declared webhook is: "
            + "; ".join(message for _, message in hooks.refusals)
            + ".",
            changes,
            retry=any(reason in _SECRET_WAITS for reason in reasons),
            status=status,
        )
    return Outcome(
        True,
        RECONCILED,
        f"Space '{name}' is in place (deletion policy {wanted.deletion_policy}).",
        changes,
        status=status,
    )


async def remove_space(
    db: Database, name: str, spec: Mapping[str, Any], actor: str = DEFAULT_ACTOR
) -> Outcome:
    """The Space object is gone: honour its deletionPolicy (Retain detaches, Delete removes data)."""
    if kept := await _left_to_cli(db, "space", name):
        return kept
    try:
        wanted: SpaceSpec | None = SpaceSpec.parse(spec)
    except ValidationError:
        wanted = None  # a broken spec must not block deletion: the stored policy applies
    current = await spaces.get_space(db, name)
    if wanted is not None and current is not None and current.deletion_policy != wanted.deletion_policy:
        # The policy declared last wins, even if the update that changed it was never reconciled.
        await _upsert_space(db, name, wanted, actor)
    if current is not None:
        # The resource's webhooks go with it (a retained space sends nothing to them any more).
        await webhooks.declare_webhooks(db, name, {}, frozenset(), actor)
    applied = await spaces.delete_space(db, name, actor=actor)
    if applied is None:
        return Outcome(True, DELETED, f"Space '{name}' was already absent from the database.")
    if applied == "Retain":
        return Outcome(
            True,
            RETAINED,
            f"Space '{name}' was detached and its memories and documents kept (deletionPolicy Retain); "
            "declaring it again restores them.",
            (f"detached space '{name}', keeping its data",),
        )
    return Outcome(
        True,
        DELETED,
        f"Space '{name}' was deleted with its memories and documents (deletionPolicy Delete).",
        (f"deleted space '{name}' and its data",),
    )


# --- User ---------------------------------------------------------------------------------------


def _user_changes(before: User | None, after: User) -> tuple[str, ...]:
    if before is None:
        state = "" if after.active else ", deactivated"
        return (f"created user '{after.name}' ({after.role.value}{state})",)
    changes = []
    if before.active and not after.active:
        changes.append(f"deactivated user '{after.name}': none of their keys work any more")
    elif after.active and not before.active:
        changes.append(f"activated user '{after.name}'")
    if before.role != after.role:
        changes.append(f"changed the role of '{after.name}' from {before.role.value} to {after.role.value}")
    if before.email != after.email:
        changes.append(f"changed the email of '{after.name}' from {before.email} to {after.email}")
    if before.display_name != after.display_name:
        changes.append(
            f"changed the display name of '{after.name}' from {before.display_name!r} to {after.display_name!r}"
        )
    return tuple(changes)


async def reconcile_user(
    db: Database, name: str, spec: Mapping[str, Any], actor: str = DEFAULT_ACTOR
) -> Outcome:
    """Create or update the user ``name``; deactivation and role changes apply to their keys at once."""
    try:
        validation.object_name(name, "metadata.name")
        wanted = UserSpec.parse(spec)
    except ValidationError as exc:
        return Outcome.invalid(exc)
    if refused := await _managed_by_cli(db, "user", name):
        return refused
    try:
        upserted = await users.upsert_user(
            db, name, wanted.email, wanted.display_name, wanted.role, wanted.active, actor=actor
        )
    except Conflict as exc:
        return Outcome(False, CONFLICT, f"{exc}; give each User its own email address.")
    user = upserted.user
    state = f"active as {user.role.value}" if user.active else "deactivated: none of their keys work"
    return Outcome(
        True,
        RECONCILED,
        f"User '{name}' is {state}.",
        _user_changes(upserted.before, user),
        status={"userId": str(user.id)},
    )


async def remove_user(db: Database, name: str, actor: str = DEFAULT_ACTOR) -> Outcome:
    """The User object is gone: remove the user and their keys (what they wrote stays)."""
    if kept := await _left_to_cli(db, "user", name):
        return kept
    if await users.delete_user(db, name, actor=actor):
        return Outcome(
            True, DELETED, f"User '{name}' and their keys were removed.", (f"removed user '{name}'",)
        )
    return Outcome(True, DELETED, f"User '{name}' was already absent from the database.")


# --- ApiKey -------------------------------------------------------------------------------------


def _grants_text(grants: Mapping[str, str]) -> str:
    return ", ".join(f"{space}={access}" for space, access in sorted(grants.items())) or "none"


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


class _KeyRun:
    """One ApiKey reconcile: the parsed spec, the store, and what this run changed."""

    def __init__(self, db: Database, name: str, spec: ApiKeySpec, secrets: SecretStore, actor: str) -> None:
        self.db, self.name, self.spec, self.secrets, self.actor = db, name, spec, secrets, actor
        self.changes: list[str] = []
        self.issued: str | None = None
        self.generation = spec.rotation_generation
        self.generated_at: datetime | None = None

    async def issue(self, *, create: bool, why: str) -> None:
        """Generate a key, put it in the store first (so a crash never leaves a hash without its
        plaintext), then store its hash."""
        new = keys.generate_key()
        self.generated_at = _now()
        self.generation = self.spec.rotation_generation
        await self.secrets.write(
            self.spec.secret_ref, StoredKey(new.plaintext, self.generation, self.generated_at)
        )
        if create:
            await apikeys.create_key(
                self.db,
                self.name,
                self.spec.user,
                self.spec.grants,
                self.spec.default_space,
                self.spec.expires_at,
                actor=self.actor,
                plaintext=new.plaintext,
                rotation_generation=self.generation,
                rate_limit=self.spec.rate_limit,
            )
        else:
            await apikeys.set_key_secret(
                self.db, self.name, new.plaintext, self.generation, "key.rotated", self.actor
            )
        self.issued = new.plaintext
        self.changes.append(why)

    async def create(self, stored: StoredKey | None) -> None:
        if stored is None:
            await self.issue(create=True, why=f"issued a new key for user '{self.spec.user}'")
            return
        # Drift repair: the row is gone but the key people use still exists; bring back its hash.
        await apikeys.create_key(
            self.db,
            self.name,
            self.spec.user,
            self.spec.grants,
            self.spec.default_space,
            self.spec.expires_at,
            actor=self.actor,
            plaintext=stored.plaintext,
            rotation_generation=stored.rotation_generation,
            rate_limit=self.spec.rate_limit,
        )
        self.generation, self.generated_at = stored.rotation_generation, stored.generated_at
        self.changes.append(f"restored the key from Secret {self.spec.secret_ref}; the database had lost it")
        await self.rotate_if_asked(stored.rotation_generation)

    async def update(self, stored: StoredKey | None) -> None:
        wanted = {g.space: g.access.value for g in self.spec.grants}
        done = await apikeys.update_key(
            self.db,
            self.name,
            self.spec.grants,
            self.spec.default_space,
            self.spec.expires_at,
            self.actor,
            rate_limit=self.spec.rate_limit,
        )
        if done.grants_before is not None:
            self.changes.append(
                f"set grants to {_grants_text(wanted)} (were {_grants_text(done.grants_before)})"
            )
        if done.settings_after != done.settings_before:
            self.changes.append(f"set {_differences(done.settings_before, done.settings_after, {})}")
        if stored is not None:
            self.generation, self.generated_at = stored.rotation_generation, stored.generated_at
            if not await self.rotate_if_asked(stored.rotation_generation) and await apikeys.set_key_secret(
                self.db, self.name, stored.plaintext, stored.rotation_generation, "key.restored", self.actor
            ):
                self.changes.append(
                    f"restored the key held in Secret {self.spec.secret_ref}; the database had another one"
                )
        elif self.secrets.holds_keys:
            await self.issue(
                create=False,
                why=f"issued a new key because Secret {self.spec.secret_ref} was gone; the old key stopped working",
            )
        else:
            self.generation = await apikeys.key_rotation_generation(self.db, self.name)
            await self.rotate_if_asked(self.generation)

    async def rotate_if_asked(self, current: int) -> bool:
        if self.spec.rotation_generation <= current:
            return False
        await self.issue(
            create=False,
            why=f"rotated the key (rotationGeneration {current} -> {self.spec.rotation_generation})",
        )
        return True


async def reconcile_apikey(
    db: Database,
    name: str,
    spec: Mapping[str, Any],
    secrets: SecretStore,
    actor: str = DEFAULT_ACTOR,
) -> Outcome:
    """Make the key ``name`` exist with exactly the declared grants, default space and expiry.

    The key is generated once and written only to ``secrets``; the database stores its hash. A
    later reconcile never regenerates it, except when ``rotationGeneration`` goes up or (for a
    store that holds keys) the stored key is gone. A row missing from the database while the store
    still holds the key is repaired by importing that key's hash, not by rotating.
    """
    try:
        validation.object_name(name, "metadata.name")
        wanted = ApiKeySpec.parse(spec)
    except ValidationError as exc:
        return Outcome.invalid(exc)
    if refused := await _managed_by_cli(db, "api key", name):
        return refused
    user = await users.get_user(db, wanted.user)
    if user is None:
        return Outcome(
            False,
            USER_NOT_FOUND,
            f"User '{wanted.user}' does not exist; declare it and this key follows.",
            retry=True,
        )
    missing = await spaces.missing_spaces(db, [g.space for g in wanted.grants])
    if missing:
        return _space_not_found(missing)
    run = _KeyRun(db, name, wanted, secrets, actor)  # one across attempts: it keeps every change made
    attempt = 0
    while True:
        attempt += 1
        try:
            stored = await secrets.read(wanted.secret_ref)
            if stored is not None and keys.prefix_of(stored.plaintext) is None:
                stored = None  # not one of our keys (edited by hand): treat the key as lost
            existing = await apikeys.get_key(db, name)
            if existing is None:
                await run.create(stored)
            elif existing[0].user_id != user.id:
                return Outcome(
                    False,
                    CONFLICT,
                    f"An API key named '{name}' already exists for another user; the user of a key "
                    "cannot change, so delete that key or choose another name.",
                )
            else:
                await run.update(stored)
        except SecretStoreError as exc:
            return Outcome(False, exc.reason, exc.message, retry=True)
        except SpaceNotFound as exc:  # detached between the check above and the write
            return _space_not_found([exc.key])
        except NotFound as exc:  # the user or the key's row was removed while this ran
            if exc.what == "user":
                return Outcome(
                    False,
                    USER_NOT_FOUND,
                    f"User '{exc.ident}' does not exist; declare it and this key follows.",
                    retry=True,
                )
            if attempt < _KEY_ATTEMPTS:
                continue  # the row went between our read and our write: read again and restore it
            return Outcome(
                False, CONFLICT, f"Key '{name}' was removed while it was reconciled; retrying.", retry=True
            )
        except ValidationError as exc:
            return Outcome.invalid(exc)
        return await _key_outcome(db, name, wanted, user, run)


def _space_not_found(missing: list[str]) -> Outcome:
    names = ", ".join(f"'{m}'" for m in missing)
    verb = "does" if len(missing) == 1 else "do"
    return Outcome(
        False,
        SPACE_NOT_FOUND,
        f"Granted space {names} {verb} not exist; declare it as a Space and this key follows.",
        retry=True,
    )


async def _key_outcome(db: Database, name: str, wanted: ApiKeySpec, user: User, run: _KeyRun) -> Outcome:
    found = await apikeys.get_key(db, name)
    assert found is not None, "the key was written above"
    key, grants = found
    notes = []
    if not user.active:
        notes.append(f"user '{user.name}' is deactivated, so the key does not authenticate")
    if wanted.expires_at is not None and wanted.expires_at <= datetime.now(UTC):
        notes.append(f"it expired at {wanted.expires_at.isoformat()}")
    message = f"Key '{name}' of user '{user.name}' grants {_grants_text(grants)}."
    if notes:
        message = message[:-1] + "; " + " and ".join(notes) + "."
    status: dict[str, Any] = {
        "keyId": str(key.id),
        "keyPrefix": key.prefix,
        "secretName": wanted.secret_ref.name,
        "rotationGeneration": run.generation,
        # What the "Default Space" column shows; None clears a value that no longer holds.
        "defaultSpace": identity.default_space(wanted.default_space, sorted(grants)),
    }
    if run.generated_at is not None:
        status["lastRotated"] = run.generated_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    if key.revoked_at is not None:
        # Revoked by hand (`memory-mcp key revoke`): the revocation wins over the declaration, so a
        # leaked key stays stopped; a new secret is one declared step away.
        revoked = (
            f"Key '{name}' of user '{user.name}' was revoked at {key.revoked_at.isoformat(timespec='seconds')} "
            "and stays revoked; raise spec.rotationGeneration to issue a new secret, or delete the ApiKey."
        )
        return Outcome(False, REVOKED, revoked, tuple(run.changes), new_key=run.issued, status=status)
    return Outcome(True, RECONCILED, message, tuple(run.changes), new_key=run.issued, status=status)


async def remove_apikey(
    db: Database,
    name: str,
    spec: Mapping[str, Any],
    secrets: SecretStore,
    actor: str = DEFAULT_ACTOR,
) -> Outcome:
    """The ApiKey object is gone: delete the key (it stops working) and its Secret."""
    if kept := await _left_to_cli(db, "api key", name):
        return kept
    changes = []
    if await apikeys.delete_key(db, name, actor=actor):
        changes.append(f"deleted key '{name}'")
    try:
        ref = ApiKeySpec.parse(spec).secret_ref
    except ValidationError:
        ref = None
    note = ""
    try:
        if ref is not None and await secrets.delete(ref):
            changes.append(f"deleted Secret {ref}")
    except SecretStoreError as exc:
        # The key no longer works either way; the Secret's owner reference lets Kubernetes collect it.
        note = f" The Secret was left for garbage collection: {exc.message}"
    message = f"Key '{name}' was deleted." if changes else f"Key '{name}' was already absent."
    return Outcome(True, DELETED, message + note, tuple(changes))
