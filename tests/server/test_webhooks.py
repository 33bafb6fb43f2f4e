"""Webhooks from the audit events: signed deliveries in order, retries, the dead-letter list and
replay, the receiver's address check; a real receiver over HTTP and real PostgreSQL."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from memory_mcp.server import webhook_sender
from memory_mcp.store import apikeys, documents, jobs, memories, pipeline, webhooks
from memory_mcp.store.db import Database
from tests.cli_support import Admin
from tests.factories import make_key, make_space, make_user
from tests.store.test_documents import queue_file
from tests.store.test_memories import writer


class Receiver:
    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.failures_left = 0


@contextmanager
def receiver() -> Iterator[tuple[Receiver, str]]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            failing = state.failures_left > 0
            state.failures_left -= failing
            if not failing:
                state.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(500 if failing else 204)
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{http.server_address[1]}/hooks/memory"
    finally:
        http.shutdown()


async def _drain(db: Database, send: webhooks.Sender) -> int:
    """Deliver until nothing is due, making every retry due at once (no backoff waits in a test)."""
    sent = 0
    for _ in range(50):
        async with db.transaction() as conn:
            await conn.execute(text("UPDATE webhooks SET next_attempt_at = now()"))
        if not await webhooks.deliver_next(db, send, datetime.now(UTC)):
            break
        sent += 1
    return sent


async def test_deliveries_are_signed_ordered_retried_dead_lettered_and_replayed(db: Database) -> None:
    ctx = await writer(db)
    send = webhook_sender.sender(allow_loopback=True)
    with receiver() as (got, url):
        hook, secret = await webhooks.add_webhook(db, "team", url, "user:admin")
        assert secret.startswith("whsec_") and hook.pending == 0
        first = (await memories.save_memory(db, ctx, "The build server is ci-3.")).memory
        await memories.forget_memory(db, ctx, "", memory_id=str(first.id), reason="ci-3 retired")
        got.failures_left = 2  # the receiver is down for two attempts: retried, order kept
        await _drain(db, send)
        types = [json.loads(body)["type"] for _, body in got.received]
        assert types == ["memory.saved", "memory.forgotten"]
        headers, body = got.received[1]
        event = json.loads(body)
        assert event["space"] == "team" and event["data"]["id"] == str(first.id)
        assert event["data"]["reason"] == "ci-3 retired"
        key = base64.b64decode(secret.removeprefix("whsec_"))
        signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
        expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        assert headers["webhook-signature"] == expected
        assert len({h["webhook-id"] for h, _ in got.received}) == 2

        # A receiver down for good: after the last attempt the event is dead-lettered and the next goes on.
        got.failures_left = webhooks.MAX_ATTEMPTS
        await memories.save_memory(db, ctx, "The staging cluster is k8s-stage-2.")
        await memories.save_memory(db, ctx, "The docs site is built nightly.")
        await _drain(db, send)
        (dead,) = await webhooks.dead_letters(db, "team")
        assert dead.action == "memory.saved" and dead.attempts == webhooks.MAX_ATTEMPTS
        assert json.loads(got.received[-1][1])["data"]["chars"] == len("The docs site is built nightly.")
        await webhooks.replay(db, dead.id, send, datetime.now(UTC))
        assert await webhooks.dead_letters(db, "team") == []
        assert "k8s-stage-2" not in got.received[-1][1].decode()  # only its length, never memory text
        assert json.loads(got.received[-1][1])["data"]["id"] != json.loads(got.received[-2][1])["data"]["id"]
        (listed,) = await webhooks.list_webhooks(db, "team")
        assert listed.pending == 0 and listed.dead_letters == 0


@pytest.mark.parametrize(
    "url",
    ["https://10.0.0.7/hook", "https://169.254.169.254/latest", "http://example.com/hook", "ftp://x/y"],
)
async def test_the_receiver_address_is_checked_like_client_metadata(url: str) -> None:
    with pytest.raises(webhook_sender.ReceiverRefused):
        await webhook_sender.check_receiver(url, allow_loopback=True)


async def test_loopback_receivers_only_where_loopback_is_allowed() -> None:
    with pytest.raises(webhook_sender.ReceiverRefused, match="private or local"):
        await webhook_sender.check_receiver("https://127.0.0.1:8443/hook", allow_loopback=False)
    await webhook_sender.check_receiver("http://127.0.0.1:8443/hook", allow_loopback=True)


async def test_the_webhook_commands(
    db: Database, db_urls: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    await writer(db)
    admin = Admin(db_urls[1])
    url = "http://127.0.0.1:9/hooks"
    assert "private or local address" in admin.refused("webhook", "add", "team", url)
    monkeypatch.setenv("MEMORY_MCP_OAUTH_CIMD_ALLOW_LOOPBACK", "true")
    added = admin.ok("webhook", "add", "team", url)
    assert added.stdout.strip().startswith("whsec_") and "shown once" in added.stderr
    assert "already" in admin.refused("webhook", "add", "team", url)
    assert [(h["space"], h["url"], h["managedBy"]) for h in admin.listing("webhook")] == [
        ("team", url, "cli")
    ]
    assert json.loads(admin.ok("webhook", "dead-letters", "--json").stdout) == []
    admin.ok("webhook", "remove", "team", url)
    assert admin.listing("webhook") == []
    assert "not found" in admin.refused("webhook", "remove", "team", url)


async def test_documents_done_or_failed_and_revoked_keys_reach_the_space_s_webhooks(
    db: Database, tmp_path: Path
) -> None:
    ctx = await writer(db)
    send = webhook_sender.sender(allow_loopback=True)
    with receiver() as (got, url):
        await webhooks.add_webhook(db, "team", url, "user:admin")
        done_id = await queue_file(
            db, ctx, tmp_path, "# Runbook\n\nRestart the ledger worker when invoices fail."
        )
        job = await jobs.claim(db, "w1", 30)
        assert job is not None and job.document_id == done_id
        assert await documents.complete(db, job, pipeline.prepare_text("Restart the ledger worker.")) == 1
        failed_id = await queue_file(db, ctx, tmp_path, "# Scan\n\nunreadable", name="scan.md")
        job = await jobs.claim(db, "w1", 30)
        assert job is not None and job.document_id == failed_id
        assert await jobs.fail(db, job, "the file is encrypted")
        other = await make_space(db, "elsewhere")
        key = await make_key(
            db, await make_user(db), {"team": "Read", "elsewhere": "Read"}, "team", name="ci"
        )
        assert key and other
        assert await apikeys.revoke_key(db, "ci", actor="user:admin")
        await _drain(db, send)
    events = [json.loads(body) for _, body in got.received]
    assert [(e["type"], e["data"]["id"]) for e in events] == [
        ("document.done", str(done_id)),
        ("document.failed", str(failed_id)),
        ("key.revoked", "ci"),
    ]
    assert events[0]["data"]["memories"] == 1 and events[1]["data"]["error"] == "the file is encrypted"
    assert all(e["space"] == "team" for e in events)  # the other space's event is not this webhook's


async def test_a_send_connects_to_the_address_its_check_approved_not_to_a_later_lookup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DNS rebinding: the receiver's name answers an approved address to the check and another one
    (here a loopback address where nothing listens; in an attack, an inside service) to every later
    lookup. The send still goes to the approved address. The name's resolver is the attacker here,
    so it is the one part replaced."""
    lookups: list[str] = []
    real = socket.getaddrinfo

    def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "receiver.rebind.test":
            return real(host, port, *args, **kwargs)
        lookups.append(host)
        return real("127.0.0.1" if len(lookups) == 1 else "127.0.0.2", port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    send = webhook_sender.sender(allow_loopback=True)
    with receiver() as (got, url):
        named = url.replace("127.0.0.1", "receiver.rebind.test")
        for n in range(3):
            await send(named, {"content-type": "application/json"}, json.dumps({"n": n}).encode())
    assert [json.loads(body)["n"] for _, body in got.received] == [0, 1, 2]
    assert lookups == ["receiver.rebind.test"]  # checked once within the hold; never looked up to connect
