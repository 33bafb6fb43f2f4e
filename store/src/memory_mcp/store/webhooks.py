"""Per-space webhooks: registration, signing (Standard Webhooks) and delivery from the audit events.

Delivery is at least once and in order per webhook: each webhook's next event (by writing
transaction, then id, among those of finished transactions: migration 0015) is sent, and only an answered send moves the cursor; a failed send is retried with backoff,
and after ``MAX_ATTEMPTS`` the event goes to the dead-letter list (an admin replays it) and the
cursor moves on. Any pod may deliver: a webhook row is locked while one of its events is in flight
(``FOR UPDATE SKIP LOCKED``), so no two pods send for one webhook at once. Nothing here runs in a
write's transaction: a save only writes its audit event, which is all a webhook needs.

The sending itself (HTTP) belongs to the caller (``Sender``): the store knows no HTTP. The
receiver's address check (:func:`check_receiver`, DNS only) is here, so the command line, the
operator and the sender refuse the same URLs.

Who manages a webhook (``managed_by``, migration 0017): the command line (``memory-mcp webhook
add``) or a Space resource's ``spec.webhooks`` (the operator). A resource owns the URLs it names
and leaves every other webhook of its space alone; neither tool removes the other's.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import ipaddress
import json
import secrets
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from .addresses import address_refused
from .audit import record
from .db import Database
from .errors import Conflict, NotFound
from .memories import _every_space
from .ownership import Owner

SECRET_PREFIX = "whsec_"
# A signing key's size in bytes (Standard Webhooks: 24 to 64); new secrets use the smallest.
SECRET_MIN_BYTES = 24
SECRET_MAX_BYTES = 64
# The longest receiver URL (the column's check, migration 0015).
MAX_URL = 2000
# Most webhooks a Space resource declares (its CRD's spec.webhooks maxItems).
MAX_DECLARED = 16
# Seconds one name lookup of the receiver's host, and one send, may take.
SEND_TIMEOUT_S = 5.0
MAX_ATTEMPTS = 8
# Events one lock of a webhook sends at most, in order. One event per transaction fell behind saves
# at 50/s (commit to receipt p50 10.6 s after 20 s); in batches, p50 253 ms, p99 510 ms
# (``python -m bench.lifecycle --webhooks 20``, 2 shared cores).
BATCH = 100
# Seconds before retry n (1-based): 1, 2, 4 ... capped at 5 minutes; 8 attempts span about 4 minutes.
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 300.0

# (url, headers, body) -> None; raises on any failure (refused address, timeout, non-2xx answer).
Sender = Callable[[str, dict[str, str], bytes], Awaitable[None]]


@dataclass(frozen=True)
class Webhook:
    id: uuid.UUID
    space_key: str
    url: str
    pending: int  # events after its cursor
    attempts: int  # failed sends of its next event so far
    dead_letters: int
    created_at: datetime
    managed_by: Owner = Owner.CLI


@dataclass(frozen=True)
class DeadLetter:
    id: int
    webhook_id: uuid.UUID
    space_key: str
    url: str
    event_id: int
    action: str
    attempts: int
    error: str
    failed_at: datetime


class ReceiverRefused(Exception):
    """The URL is no receiver this service sends to (scheme, credentials, address)."""


async def check_receiver(url: str, allow_loopback: bool) -> list[str]:
    """Refuse a receiver URL that is not https to a public address, as client metadata documents'
    are (loopback, https or http, only with ``allow_loopback``: development and tests). Every
    address the name resolves to is checked, and they are returned: the sender connects to these,
    never to a second lookup's answer. It checks again before it sends, at most a second after its
    last check."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host or parts.username or parts.password or parts.scheme not in ("https", "http"):
        raise ReceiverRefused("the webhook URL must be https://host/path, without credentials")
    if len(url) > MAX_URL:
        raise ReceiverRefused(f"the webhook URL must be at most {MAX_URL} characters")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ReceiverRefused("the webhook URL has no valid port") from None
    try:
        async with asyncio.timeout(SEND_TIMEOUT_S):
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError):
        raise ReceiverRefused("the webhook host does not resolve") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses or any(address_refused(a, allow_loopback) for a in addresses):
        raise ReceiverRefused("the webhook URL points at a private or local address")
    if parts.scheme == "http" and not all(ipaddress.ip_address(a).is_loopback for a in addresses):
        raise ReceiverRefused("the webhook URL must be https (http only to loopback)")
    return addresses


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_MIN_BYTES)).decode()


def secret_problem(secret: str) -> str | None:
    """Why ``secret`` is no signing secret (``whsec_`` + base64 of 24 to 64 bytes), or None."""
    if not secret.startswith(SECRET_PREFIX):
        return f"a signing secret starts with {SECRET_PREFIX}"
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except (binascii.Error, ValueError):
        return f"a signing secret is {SECRET_PREFIX} followed by base64"
    if not SECRET_MIN_BYTES <= len(key) <= SECRET_MAX_BYTES:
        return (
            f"a signing secret's key is {SECRET_MIN_BYTES} to {SECRET_MAX_BYTES} bytes, "
            f"this one is {len(key)} (make one with: echo {SECRET_PREFIX}$(head -c 32 /dev/urandom | base64))"
        )
    return None


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256 of "id.timestamp.body">`` keyed by the secret's bytes (Standard Webhooks)."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def message(secret: str, event: Any, space_key: str, now: datetime) -> tuple[dict[str, str], bytes]:
    """The headers and JSON body of one event's delivery."""
    body = json.dumps(
        {
            "type": event.action,
            "space": space_key,
            "data": {
                "id": event.target_id,
                "targetType": event.target_type,
                "actor": event.actor,
                "at": event.at.isoformat(),
                **dict(event.details),
            },
        },
        separators=(",", ":"),
        default=str,
    ).encode()
    message_id = f"msg_{event.id}"
    timestamp = int(now.timestamp())
    headers = {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, message_id, timestamp, body),
    }
    return headers, body


async def _insert(
    conn: AsyncConnection, space_id: uuid.UUID, url: str, secret: str, owner: Owner, actor: str
) -> uuid.UUID:
    """A new webhook of the space whose first event is the next one after its own ``webhook.added``."""
    hook_id: uuid.UUID = (
        await conn.execute(
            text(
                "INSERT INTO webhooks (space_id, url, secret, managed_by, after_txid, after_event) VALUES (:s, :u, "
                ":sec, :o, pg_current_xact_id(), (SELECT coalesce(max(id), 0) FROM audit_events)) RETURNING id"
            ),
            {"s": space_id, "u": url, "sec": secret, "o": owner.value},
        )
    ).scalar_one()
    await record(
        conn, actor, "webhook.added", "webhook", str(hook_id), space_id=space_id, details={"url": url}
    )
    await conn.execute(
        text("UPDATE webhooks SET after_event = (SELECT max(id) FROM audit_events) WHERE id = :id"),
        {"id": hook_id},
    )
    return hook_id


async def _delete(
    conn: AsyncConnection, hook_id: uuid.UUID, space_id: uuid.UUID, url: str, actor: str
) -> None:
    await conn.execute(text("DELETE FROM webhooks WHERE id = :id"), {"id": hook_id})
    await record(
        conn, actor, "webhook.removed", "webhook", str(hook_id), space_id=space_id, details={"url": url}
    )


async def _space_id(conn: AsyncConnection, space_key: str) -> uuid.UUID:
    space = (await conn.execute(text("SELECT id FROM spaces WHERE key = :k"), {"k": space_key})).first()
    if space is None:
        raise NotFound("space", space_key)
    found: uuid.UUID = space.id
    return found


async def add_webhook(db: Database, space_key: str, url: str, actor: str) -> tuple[Webhook, str]:
    """Register ``url`` for the space's events from now on (the command line manages it); returns it
    and its signing secret."""
    secret = new_secret()
    try:
        async with db.transaction() as conn:
            hook_id = await _insert(conn, await _space_id(conn, space_key), url, secret, Owner.CLI, actor)
    except IntegrityError:
        raise Conflict(f"space '{space_key}' has a webhook for this URL already") from None
    (hook,) = [w for w in await list_webhooks(db, space_key) if w.id == hook_id]
    return hook, secret


async def list_webhooks(db: Database, space_key: str | None = None) -> list[Webhook]:
    async with db.transaction() as conn:
        rows = await conn.execute(
            text(
                "SELECT w.id, s.key, w.url, w.attempts, w.created_at, w.managed_by, "
                "(SELECT count(*) FROM audit_events e WHERE e.space_id = w.space_id "
                "AND (e.txid, e.id) > (w.after_txid, w.after_event)) AS pending, "
                "(SELECT count(*) FROM webhook_dead_letters d WHERE d.webhook_id = w.id) AS dead "
                "FROM webhooks w JOIN spaces s ON s.id = w.space_id "
                "WHERE CAST(:k AS text) IS NULL OR s.key = :k ORDER BY s.key, w.created_at"
            ),
            {"k": space_key},
        )
        return [
            Webhook(
                r.id, r.key, r.url, int(r.pending), r.attempts, int(r.dead), r.created_at, Owner(r.managed_by)
            )
            for r in rows
        ]


async def remove_webhook(db: Database, space_key: str, url: str, actor: str) -> None:
    """Remove a webhook the command line added; one a Space resource declares is refused (its
    ``spec.webhooks`` is where it goes)."""
    async with db.transaction() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT w.id, w.space_id, w.managed_by FROM webhooks w JOIN spaces s ON s.id = w.space_id "
                    "WHERE s.key = :k AND w.url = :u FOR UPDATE OF w"
                ),
                {"k": space_key, "u": url},
            )
        ).first()
        if row is None:
            raise NotFound("webhook", url)
        if row.managed_by != Owner.CLI:
            raise Conflict(
                f"the webhook {url} of space '{space_key}' is declared in the Space resource '{space_key}'; "
                "remove it from that resource's spec.webhooks"
            )
        await _delete(conn, row.id, row.space_id, url, actor)


@dataclass(frozen=True)
class DeclaredWebhooks:
    """What :func:`declare_webhooks` changed (URLs), and the declared URLs the command line holds."""

    added: tuple[str, ...] = ()
    rekeyed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    held_by_cli: tuple[str, ...] = ()


async def declare_webhooks(
    db: Database, space_key: str, wanted: Mapping[str, str], keep: frozenset[str], actor: str
) -> DeclaredWebhooks:
    """Make the space's resource-managed webhooks exactly ``wanted`` (``{url: secret}``).

    A wanted URL that is missing is added (its first event is the next one), one whose secret
    differs gets the new secret (the next delivery is signed with it), and a resource-managed URL
    neither wanted nor in ``keep`` (declared, but unusable now: its row stays as it was) is removed.
    Webhooks the command line added are never touched: a wanted URL it holds is reported in
    ``held_by_cli``. Raises ``NotFound`` for an absent space.
    """
    added: list[str] = []
    rekeyed: list[str] = []
    removed: list[str] = []
    held: list[str] = []
    async with db.transaction() as conn:
        space_id = await _space_id(conn, space_key)
        rows = (
            await conn.execute(
                text(
                    "SELECT id, url, secret, managed_by FROM webhooks WHERE space_id = :s ORDER BY created_at"
                ),
                {"s": space_id},
            )
        ).all()
        existing = {r.url: r for r in rows}
        for url, secret in wanted.items():
            row = existing.get(url)
            if row is None:
                await _insert(conn, space_id, url, secret, Owner.MANIFEST, actor)
                added.append(url)
            elif row.managed_by == Owner.CLI:
                held.append(url)
            elif not hmac.compare_digest(row.secret, secret):
                await conn.execute(
                    text("UPDATE webhooks SET secret = :s WHERE id = :id"), {"s": secret, "id": row.id}
                )
                await record(
                    conn,
                    actor,
                    "webhook.secret_changed",
                    "webhook",
                    str(row.id),
                    space_id=space_id,
                    details={"url": url},
                )
                rekeyed.append(url)
        for row in rows:
            if row.managed_by == Owner.MANIFEST and row.url not in wanted and row.url not in keep:
                await _delete(conn, row.id, space_id, row.url, actor)
                removed.append(row.url)
    return DeclaredWebhooks(tuple(added), tuple(rekeyed), tuple(removed), tuple(held))


async def dead_letters(db: Database, space_key: str | None = None) -> list[DeadLetter]:
    async with db.transaction() as conn:
        rows = await conn.execute(
            text(
                "SELECT d.id, d.webhook_id, s.key, w.url, d.event_id, e.action, d.attempts, d.error, d.failed_at "
                "FROM webhook_dead_letters d JOIN webhooks w ON w.id = d.webhook_id JOIN spaces s ON s.id = w.space_id "
                "JOIN audit_events e ON e.id = d.event_id "
                "WHERE CAST(:k AS text) IS NULL OR s.key = :k ORDER BY d.id"
            ),
            {"k": space_key},
        )
        return [DeadLetter(*r) for r in rows]


_EVENT = (
    "SELECT e.id, e.txid, e.at, e.actor, e.action, e.target_type, e.target_id, e.details FROM audit_events e"
)
# A webhook's (``w``) events after its cursor, of transactions that ended before any still running.
_DUE_WHERE = (
    "e.space_id = w.space_id AND (e.txid, e.id) > (w.after_txid, w.after_event) "
    "AND e.txid < pg_snapshot_xmin(pg_current_snapshot())"
)
_DUE = f"SELECT 1 FROM audit_events e WHERE {_DUE_WHERE}"


async def replay(db: Database, dead_letter_id: int, send: Sender, now: datetime) -> None:
    """Send a dead-lettered event again, now; on success it leaves the list (a failure raises)."""
    async with _every_space(db) as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT d.event_id, w.url, w.secret, s.key FROM webhook_dead_letters d "
                    "JOIN webhooks w ON w.id = d.webhook_id JOIN spaces s ON s.id = w.space_id "
                    "WHERE d.id = :id FOR UPDATE OF d"
                ),
                {"id": dead_letter_id},
            )
        ).first()
        if row is None:
            raise NotFound("dead letter", str(dead_letter_id))
        event = (await conn.execute(text(f"{_EVENT} WHERE e.id = :id"), {"id": row.event_id})).one()
        headers, body = message(row.secret, event, row.key, now)
        await send(row.url, headers, body)
        await conn.execute(text("DELETE FROM webhook_dead_letters WHERE id = :id"), {"id": dead_letter_id})


def backoff_s(attempts: int) -> float:
    return float(min(BACKOFF_BASE_S * 2 ** (attempts - 1), BACKOFF_CAP_S))


async def deliver_next(db: Database, send: Sender, now: datetime) -> bool:
    """Send the due events of one webhook that has some, in order, up to ``BATCH`` of them and only
    while the receiver takes them; False when no webhook has one due (or all are taken)."""
    async with _every_space(db) as conn:
        hook = (
            await conn.execute(
                text(
                    "SELECT w.id, w.url, w.secret, w.after_txid, w.after_event, w.attempts, s.key FROM webhooks w "
                    f"JOIN spaces s ON s.id = w.space_id WHERE w.next_attempt_at <= now() AND EXISTS ({_DUE}) "
                    "ORDER BY w.next_attempt_at LIMIT 1 FOR UPDATE OF w SKIP LOCKED"
                )
            )
        ).first()
        if hook is None:
            return False
        events = (
            await conn.execute(
                text(
                    f"{_EVENT} JOIN webhooks w ON w.id = :w WHERE {_DUE_WHERE} ORDER BY e.txid, e.id LIMIT :n"
                ),
                {"w": hook.id, "n": BATCH},
            )
        ).all()
        last = None
        for event in events:
            headers, body = message(hook.secret, event, hook.key, now)
            try:
                await send(hook.url, headers, body)
            except Exception as exc:  # any failure of the receiver or the way to it: retried
                attempts = hook.attempts + 1 if last is None else 1
                if attempts < MAX_ATTEMPTS:
                    await _advance(conn, hook.id, last)
                    await conn.execute(
                        text(
                            "UPDATE webhooks SET attempts = :a, next_attempt_at = now() + make_interval(secs => :d) "
                            "WHERE id = :w"
                        ),
                        {"a": attempts, "d": backoff_s(attempts), "w": hook.id},
                    )
                    return True
                await conn.execute(
                    text(
                        "INSERT INTO webhook_dead_letters (webhook_id, event_id, attempts, error) "
                        "VALUES (:w, :e, :a, :err)"
                    ),
                    {
                        "w": hook.id,
                        "e": event.id,
                        "a": attempts,
                        "err": (str(exc) or exc.__class__.__name__)[:500],
                    },
                )
                await _advance(conn, hook.id, event)
                return True
            last = event
        await _advance(conn, hook.id, last)
        return True


async def _advance(conn: AsyncConnection, hook_id: uuid.UUID, event: Any) -> None:
    """Move the webhook's cursor past ``event`` (delivered or dead-lettered); nothing when None."""
    if event is not None:
        await conn.execute(
            text(
                "UPDATE webhooks SET after_txid = :t, after_event = :e, attempts = 0, next_attempt_at = now() "
                "WHERE id = :w"
            ),
            {"t": event.txid, "e": event.id, "w": hook_id},
        )
