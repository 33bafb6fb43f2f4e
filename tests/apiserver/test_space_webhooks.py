"""A Space's spec.webhooks through the real operator process and a real API server: the schema
takes them, the chart's RBAC lets the operator read their Secrets, the rows follow the spec and
the Secret's value (resync), and a broken Secret is a status condition, not a crash."""

from __future__ import annotations

import base64
from functools import partial
from typing import Any

import pytest
from sqlalchemy import text

from memory_mcp.store.db import Database
from tests.apiserver.kube import ApiError, Kube, wait_for
from tests.apiserver.support import SECRET_NAMESPACE, OperatorProcess, ready_because, ready_true

pytestmark = pytest.mark.apiserver

# A public address (the operator checks the receiver's address; it sends nothing itself).
URL = "https://93.184.216.34/memory-events"
SECRET = "whsec_" + base64.b64encode(b"a" * 32).decode()
ROTATED = "whsec_" + base64.b64encode(b"b" * 32).decode()


def secret_manifest(name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": SECRET_NAMESPACE},
        "data": {"signing": base64.b64encode(value.encode()).decode()},
    }


def hooks(url: str, secret: str) -> list[dict[str, Any]]:
    return [{"url": url, "secretRef": {"namespace": SECRET_NAMESPACE, "name": secret, "key": "signing"}}]


async def rows(db: Database, space: str) -> dict[str, tuple[str, str]]:
    async with db.transaction() as conn:
        found = await conn.execute(
            text(
                "SELECT w.url, w.secret, w.managed_by FROM webhooks w JOIN spaces s ON s.id = w.space_id "
                "WHERE s.key = :k"
            ),
            {"k": space},
        )
        return {r.url: (r.secret, r.managed_by) for r in found}


async def rows_are(db: Database, space: str, wanted: dict[str, tuple[str, str]]) -> bool:
    return await rows(db, space) == wanted


async def test_declared_webhooks_follow_the_spec_and_the_secret(
    operator: OperatorProcess, kube: Kube, operator_db: Database
) -> None:
    space, secret = "hooked-space", "hooked-signing"
    await kube.create(secret_manifest(secret, SECRET))
    await kube.create_object("Space", space, {"displayName": "Hooked", "webhooks": hooks(URL, secret)})
    await wait_for(partial(ready_true, kube, "Space", space), what="Ready on the Space")
    assert await rows(operator_db, space) == {URL: (SECRET, "manifest")}
    status = (await kube.get("Space", space) or {})["status"]
    assert status["webhooks"] == [{"url": URL, "state": "Active", "deadLetters": 0}]

    # A new value in the Secret: the operator's periodic resync picks it up (no watch on Secrets).
    patched = secret_manifest(secret, ROTATED)
    await kube.request(
        "PATCH",
        kube.secret_path(SECRET_NAMESPACE, secret),
        {"data": patched["data"]},
        content_type="application/merge-patch+json",
    )
    await wait_for(
        partial(rows_are, operator_db, space, {URL: (ROTATED, "manifest")}), within=30, what="the new secret"
    )

    # A value that is no signing secret: Ready=False with the reason, the last good row kept.
    broken = secret_manifest(secret, "not-a-signing-secret")
    await kube.request(
        "PATCH",
        kube.secret_path(SECRET_NAMESPACE, secret),
        {"data": broken["data"]},
        content_type="application/merge-patch+json",
    )
    condition, _ = await wait_for(
        partial(ready_because, kube, "Space", space, "WebhookSecretInvalid"), within=30, what="the refusal"
    )
    assert "spec.webhooks[0].secretRef" in condition["message"]
    assert await rows(operator_db, space) == {URL: (ROTATED, "manifest")}
    assert operator.alive(), operator.output()

    # The entry removed from the spec: its row goes.
    await kube.update_spec("Space", space, {"webhooks": []})
    await wait_for(partial(rows_are, operator_db, space, {}), what="the row removed")
    await wait_for(partial(ready_true, kube, "Space", space), what="Ready again")


async def test_a_missing_secret_or_a_private_address_makes_no_row(
    operator: OperatorProcess, kube: Kube, operator_db: Database
) -> None:
    await kube.create_object(
        "Space", "nosecret-space", {"displayName": "No secret", "webhooks": hooks(URL, "absent")}
    )
    condition, _ = await wait_for(
        partial(ready_because, kube, "Space", "nosecret-space", "SecretNotFound"), what="SecretNotFound"
    )
    assert "does not exist" in condition["message"]
    await kube.create(secret_manifest("private-signing", SECRET))
    await kube.create_object(
        "Space",
        "private-space",
        {"displayName": "Private", "webhooks": hooks("https://10.1.2.3/hook", "private-signing")},
    )
    condition, _ = await wait_for(
        partial(ready_because, kube, "Space", "private-space", "WebhookAddressRefused"), what="the refusal"
    )
    assert "private or local address" in condition["message"]
    assert await rows(operator_db, "nosecret-space") == {}
    assert await rows(operator_db, "private-space") == {}


async def test_the_api_server_refuses_a_url_declared_twice(
    kube: Kube, installed: list[dict[str, Any]]
) -> None:
    twice = hooks(URL, "s") + hooks(URL, "t")
    with pytest.raises(ApiError) as refused:
        await kube.create_object("Space", "twice-space", {"displayName": "Twice", "webhooks": twice})
    assert refused.value.status == 422 and "Duplicate value" in str(refused.value.body)
