"""A Space's spec.webhooks through the real operator: signing secrets read from Secrets, the rows
the resource owns, refusals in the status, secret rotation, and deliveries signed with the value."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from memory_mcp.apply import apply_manifests, load_manifests
from memory_mcp.server import webhook_sender
from memory_mcp.store import memories, spaces, webhooks
from memory_mcp.store.db import Database
from memory_mcp.store.errors import Conflict
from memory_mcp.store.ownership import Owner
from tests.operator.support import OPTIONS, Cluster, RunningOperator, eventually, running_operator
from tests.server.test_webhooks import receiver
from tests.store.test_memories import writer

# Loopback receivers are allowed here as the server's oauth_cimd_allow_loopback allows them in tests.
LOOPBACK = replace(OPTIONS, allow_loopback_receivers=True)
SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
ROTATED = "whsec_" + base64.b64encode(b"r" * 32).decode()


@pytest.fixture
async def operator(cluster: Cluster, db_urls: tuple[str, str]) -> AsyncIterator[RunningOperator]:
    async with running_operator(cluster, db_urls, LOOPBACK) as running:
        yield running


def space(*hooks: tuple[str, str]) -> dict[str, Any]:
    """Space spec with webhooks (url, Secret name in namespace 'hooks', key 'signing')."""
    declared = [
        {"url": url, "secretRef": {"namespace": "hooks", "name": name, "key": "signing"}}
        for url, name in hooks
    ]
    return {"displayName": "Alpha", "webhooks": declared}


def stored(operator: RunningOperator, space_key: str = "alpha") -> dict[str, tuple[str, str]]:
    """{url: (secret, managed_by)} of the space's webhook rows."""
    rows = operator.sql(
        "SELECT w.url, w.secret, w.managed_by FROM webhooks w JOIN spaces s ON s.id = w.space_id "
        "WHERE s.key = %(k)s",
        k=space_key,
    )
    return {url: (secret, owner) for url, secret, owner in rows}


def hook_status(cluster: Cluster, url: str) -> dict[str, Any]:
    found = cluster.get("Space", "alpha").get("status", {}).get("webhooks", [])
    return next((h for h in found if h["url"] == url), {})


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The Standard Webhooks check a receiver makes with the secret it was given."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return hmac.compare_digest(headers["webhook-signature"], expected)


async def deliver_all(db: Database) -> None:
    send = webhook_sender.sender(allow_loopback=True)
    while await webhooks.deliver_next(db, send, datetime.now(UTC)):
        pass


async def test_a_declared_webhook_signs_with_its_secrets_value_and_follows_a_rotation(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    with receiver() as (got, url):
        await cluster.create_secret("hooks", "alpha-hook", {"signing": SECRET})
        await cluster.create("Space", "alpha", space((url, "alpha-hook")))
        await cluster.ready_because("Space", "alpha", "Reconciled")
        assert stored(operator) == {url: (SECRET, "manifest")}
        assert hook_status(cluster, url) == {"url": url, "state": "Active", "deadLetters": 0}
        (hook,) = await webhooks.list_webhooks(db, "alpha")
        assert hook.managed_by is Owner.MANIFEST

        ctx = await writer(db, "alpha")
        await memories.save_memory(db, ctx, "The release branch is cut on Mondays.")
        await deliver_all(db)
        headers, body = got.received[-1]
        assert json.loads(body)["type"] == "memory.saved"
        assert verify(SECRET, headers, body) and not verify(ROTATED, headers, body)

        # The value changes in the Secret only: the next resync signs with the new one.
        await cluster.update_secret("hooks", "alpha-hook", {"signing": ROTATED})
        await eventually(lambda: stored(operator) == {url: (ROTATED, "manifest")}, what="the rotated secret")
        changed = operator.sql("SELECT count(*) FROM audit_events WHERE action = 'webhook.secret_changed'")
        assert changed == [(1,)]
        await memories.save_memory(db, ctx, "Hotfixes go to the release branch first.")
        await deliver_all(db)
        headers, body = got.received[-1]
        assert json.loads(body)["data"]["chars"] == len("Hotfixes go to the release branch first.")
        assert verify(ROTATED, headers, body) and not verify(SECRET, headers, body)


async def test_the_resource_owns_the_urls_it_names_and_leaves_the_command_lines_alone(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    declared, cli = "http://127.0.0.1:9/declared", "http://127.0.0.1:9/by-hand"
    await cluster.create_secret("hooks", "alpha-hook", {"signing": SECRET})
    await cluster.create("Space", "alpha", space((declared, "alpha-hook")))
    await cluster.ready_because("Space", "alpha", "Reconciled")
    _, cli_secret = await webhooks.add_webhook(db, "alpha", cli, "cli")
    with pytest.raises(Conflict, match=r"spec\.webhooks"):
        await webhooks.remove_webhook(db, "alpha", declared, "cli")

    # Removing the entry removes its row; the command line's webhook stays through resyncs.
    generation = await cluster.update("Space", "alpha", {"webhooks": []})
    await eventually(
        lambda: cluster.get("Space", "alpha")["status"]["observedGeneration"] == generation,
        what="generation 2",
    )
    assert stored(operator) == {cli: (cli_secret, "cli")}
    assert cluster.get("Space", "alpha")["status"]["webhooks"] == []
    removed = [e["message"] for e in cluster.events("Reconciled")]
    assert f"Removed webhook {declared}." in removed

    # Naming the command line's URL does not take it over: the status says where to remove it.
    await cluster.update("Space", "alpha", space((cli, "alpha-hook")))
    condition = await cluster.ready_because("Space", "alpha", "Conflict")
    assert "memory-mcp webhook remove alpha" in condition["message"]
    assert stored(operator) == {cli: (cli_secret, "cli")}
    assert hook_status(cluster, cli)["state"] == "Refused"
    await webhooks.remove_webhook(db, "alpha", cli, "cli")
    await eventually(lambda: stored(operator) == {cli: (SECRET, "manifest")}, what="the declared row")
    await cluster.ready_because("Space", "alpha", "Reconciled")

    # Deleting the Space takes its declared webhooks with it (its data is retained).
    await cluster.delete("Space", "alpha")
    await eventually(lambda: not cluster.exists("Space", "alpha"), what="Space alpha gone")
    assert stored(operator) == {}


@pytest.mark.parametrize(
    ("secret", "reason", "said"),
    [
        (None, "SecretNotFound", "does not exist"),
        ({"other": SECRET}, "SecretKeyNotFound", "no key 'signing' (its keys: other)"),
        ({"signing": "not-a-whsec"}, "WebhookSecretInvalid", "starts with whsec_"),
        ({"signing": "whsec_c2hvcnQ="}, "WebhookSecretInvalid", "this one is 5"),
        ({"signing": "whsec_!!!"}, "WebhookSecretInvalid", "followed by base64"),
    ],
)
async def test_a_secret_it_cannot_use_is_refused_in_the_status_and_makes_no_row(
    operator: RunningOperator,
    cluster: Cluster,
    secret: dict[str, str] | None,
    reason: str,
    said: str,
) -> None:
    url = "http://127.0.0.1:9/hook"
    if secret is not None:
        await cluster.create_secret("hooks", "alpha-hook", secret)
    await cluster.create("Space", "alpha", space((url, "alpha-hook")))
    condition = await cluster.ready_because("Space", "alpha", reason)
    assert condition["status"] == "False" and said in condition["message"]
    assert "spec.webhooks[0].secretRef" in condition["message"]
    assert SECRET not in condition["message"]
    assert hook_status(cluster, url)["reason"] == reason
    assert operator.sql("SELECT key FROM spaces") == [("alpha",)], "the space itself is in place"
    assert stored(operator) == {}

    # Fixed in the Secret alone: the row appears at the next reconcile.
    if secret is None:
        await cluster.create_secret("hooks", "alpha-hook", {"signing": SECRET})
    else:
        await cluster.update_secret("hooks", "alpha-hook", {"signing": SECRET})
    await eventually(lambda: stored(operator) == {url: (SECRET, "manifest")}, what="the webhook row")
    await cluster.ready_because("Space", "alpha", "Reconciled")


@pytest.mark.parametrize(
    "url", ["https://10.0.0.7/hook", "https://169.254.169.254/latest/meta-data", "http://example.com/hook"]
)
async def test_a_receiver_the_address_guard_refuses_makes_no_row(
    operator: RunningOperator, cluster: Cluster, url: str
) -> None:
    await cluster.create_secret("hooks", "alpha-hook", {"signing": SECRET})
    await cluster.create("Space", "alpha", space((url, "alpha-hook")))
    condition = await cluster.ready_because("Space", "alpha", "WebhookAddressRefused")
    assert "spec.webhooks[0].url" in condition["message"]
    assert stored(operator) == {}


async def test_loopback_receivers_are_refused_unless_allowed(
    cluster: Cluster, db_urls: tuple[str, str]
) -> None:
    async with running_operator(cluster, db_urls, OPTIONS) as operator:
        await cluster.create_secret("hooks", "alpha-hook", {"signing": SECRET})
        await cluster.create("Space", "alpha", space(("http://127.0.0.1:9/hook", "alpha-hook")))
        condition = await cluster.ready_because("Space", "alpha", "WebhookAddressRefused")
        assert "private or local address" in condition["message"]
        assert stored(operator) == {}


async def test_a_bad_secret_later_keeps_the_last_good_one(
    operator: RunningOperator, cluster: Cluster
) -> None:
    url = "http://127.0.0.1:9/hook"
    await cluster.create_secret("hooks", "alpha-hook", {"signing": SECRET})
    await cluster.create("Space", "alpha", space((url, "alpha-hook")))
    await cluster.ready_because("Space", "alpha", "Reconciled")
    await cluster.update_secret("hooks", "alpha-hook", {"signing": "whsec_"})
    await cluster.ready_because("Space", "alpha", "WebhookSecretInvalid")
    with contextlib.suppress(AssertionError):  # a few resyncs: the row must not change meanwhile
        await eventually(lambda: stored(operator) != {url: (SECRET, "manifest")}, within=2.0)
    assert stored(operator) == {url: (SECRET, "manifest")}


async def test_apply_has_no_secrets_to_read_so_it_says_so_and_leaves_webhooks_alone(db: Database) -> None:
    manifest = {
        "apiVersion": "memory-mcp.io/v1alpha1",
        "kind": "Space",
        "metadata": {"name": "alpha"},
        "spec": space(("https://hooks.example.com/memory", "alpha-hook")),
    }
    report = await apply_manifests(db, load_manifests(json.dumps(manifest)))
    (applied,) = report.results
    assert (applied.outcome.ready, applied.outcome.reason) == (False, "WebhooksNotApplied")
    assert "memory-mcp webhook add alpha URL" in applied.describe()
    assert await spaces.get_space(db, "alpha") is not None, "the space itself is applied"
    assert await webhooks.list_webhooks(db, "alpha") == []
