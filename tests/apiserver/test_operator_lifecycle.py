"""Space, User and ApiKey through the real operator process and a real API server.

Each test declares objects of its own (names prefixed by the test), so the tests share one
control plane, one operator and one database without depending on each other.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import pytest

from memory_mcp.store import apikeys, spaces, users
from memory_mcp.store.db import Database
from tests.apiserver.kube import GROUP_VERSION, Kube, wait_for
from tests.apiserver.support import (
    SECRET_NAMESPACE,
    OperatorProcess,
    declare,
    gone,
    grants_are,
    grants_of,
    observed,
    ready_because,
    ready_true,
    record_latency,
    refused,
)

pytestmark = pytest.mark.apiserver

FINALIZER = "memory-mcp.io/finalizer"


async def test_objects_become_rows_and_report_ready(
    operator: OperatorProcess, kube: Kube, operator_db: Database
) -> None:
    d = await declare(kube, "rows")
    for kind, name in (("Space", d.space), ("User", d.user), ("ApiKey", d.apikey)):
        ready, _ = await wait_for(partial(ready_true, kube, kind, name), what=f"Ready on {kind}")
        obj = await kube.get(kind, name)
        assert obj is not None
        assert ready["reason"] == "Reconciled"
        # The API server sets generation; the operator reports the one it handled.
        assert ready["observedGeneration"] == obj["metadata"]["generation"] == 1
        assert FINALIZER in obj["metadata"]["finalizers"]
    space = await spaces.get_space(operator_db, d.space)
    assert space is not None and space.display_name == "Space of rows"
    user = await users.get_user(operator_db, d.user)
    assert user is not None
    assert (await kube.get("User", d.user) or {})["status"]["userId"] == str(user.id)
    stored = await apikeys.get_key(operator_db, d.apikey)
    assert stored is not None and stored[1] == {d.space: "ReadWrite"}
    status = (await kube.get("ApiKey", d.apikey) or {})["status"]
    assert (status["keyPrefix"], status["secretName"]) == (d.key.split("_")[1], d.secret)
    assert await grants_of(operator_db, d.key) == {d.space: "ReadWrite"}
    assert operator.alive(), operator.output()


async def test_objects_applied_together_converge(
    operator: OperatorProcess, kube: Kube, operator_db: Database
) -> None:
    """Space, User and ApiKey created in one go (one ``kubectl apply -f``): the key still comes."""
    d = await declare(kube, "together", together=True)
    assert await grants_of(operator_db, d.key) == {d.space: "ReadWrite"}
    for kind, name in (("Space", d.space), ("User", d.user)):
        await wait_for(partial(ready_true, kube, kind, name), what=f"Ready on {kind} {name}")


async def test_the_key_secret_is_owned_by_its_apikey(operator: OperatorProcess, kube: Kube) -> None:
    d = await declare(kube, "owned")
    apikey = await kube.get("ApiKey", d.apikey)
    secret = await kube.secret(SECRET_NAMESPACE, d.secret)
    assert apikey is not None and secret is not None
    assert secret["type"] == "Opaque"
    assert secret["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "memory-mcp"}
    assert secret["metadata"]["annotations"]["memory-mcp.io/api-key"] == d.apikey
    # The uid is the API server's own: an ownerReference with any other would be collected.
    assert secret["metadata"]["ownerReferences"] == [
        {
            "apiVersion": GROUP_VERSION,
            "kind": "ApiKey",
            "name": d.apikey,
            "uid": apikey["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


async def test_a_grant_change_is_visible_and_keeps_the_key(
    operator: OperatorProcess, kube: Kube, operator_db: Database
) -> None:
    d = await declare(kube, "grants")
    await kube.create_object("Space", "grants-handbook", {"displayName": "Handbook"})
    await wait_for(lambda: spaces.get_space(operator_db, "grants-handbook"), what="the second space")
    wanted = {d.space: "ReadWrite", "grants-handbook": "Read"}
    grants = [{"space": space, "access": access} for space, access in wanted.items()]
    started = time.monotonic()
    generation = await kube.update_spec("ApiKey", d.apikey, {"grants": grants})
    await wait_for(
        lambda: grants_are(operator_db, d.key, wanted), what="the new grants in the database", within=30
    )
    record_latency("grant change visible", time.monotonic() - started)
    assert generation == 2
    await wait_for(
        lambda: observed(kube, "ApiKey", d.apikey, generation), what="status of generation 2", within=30
    )
    assert await kube.secret_key(SECRET_NAMESPACE, d.secret) == d.key
    events, _ = await wait_for(
        lambda: _messages(kube, "ApiKey", d.apikey, "Set grants to"), what="the grants Event"
    )
    assert events == [f"Set grants to grants-handbook=Read, {d.space}=ReadWrite (were {d.space}=ReadWrite)."]


async def _messages(kube: Kube, kind: str, name: str, start: str) -> list[str]:
    return [e["message"] for e in await kube.events(kind, name) if e["message"].startswith(start)]


async def test_events_are_posted_for_each_object(operator: OperatorProcess, kube: Kube) -> None:
    d = await declare(kube, "events")
    expected = {
        ("Space", d.space): f"Created space '{d.space}'.",
        ("ApiKey", d.apikey): f"Issued a new key for user '{d.user}'.",
    }
    for (kind, name), message in expected.items():
        obj = await kube.get(kind, name)
        assert obj is not None
        await wait_for(partial(_messages, kube, kind, name, message), what=f"'{message}' on {kind} {name}")
        for event in await kube.events(kind, name):
            assert event["involvedObject"]["uid"] == obj["metadata"]["uid"]
            assert event["involvedObject"]["apiVersion"] == GROUP_VERSION
            assert event["type"] in ("Normal", "Warning")
            assert d.key not in event["message"]


async def test_a_spec_only_cel_would_refuse_is_refused_by_the_operator(
    operator: OperatorProcess, kube: Kube, operator_db: Database
) -> None:
    """1.20 has no CEL: the API server stores this ApiKey, the operator refuses it and warns."""
    await kube.create_object("Space", "nocel-space", {"displayName": "No CEL"})
    await kube.create_object(
        "User", "nocel-user", {"email": "nocel@example.com", "displayName": "No CEL", "role": "Reader"}
    )
    await kube.create_object(
        "ApiKey",
        "nocel-key",
        {
            "user": "nocel-user",
            "grants": [{"space": "nocel-space", "access": "Read"}],
            "defaultSpace": "elsewhere",
            "secretRef": {"namespace": SECRET_NAMESPACE, "name": "nocel-key"},
        },
    )

    ready, _ = await wait_for(
        lambda: ready_because(kube, "ApiKey", "nocel-key", "InvalidSpec"), what="InvalidSpec on the ApiKey"
    )
    assert ready["status"] == "False"
    assert ready["message"] == "spec.defaultSpace: 'elsewhere' must be one of the granted spaces"
    warnings, _ = await wait_for(
        lambda: _warnings(kube, "ApiKey", "nocel-key", "InvalidSpec"), what="a Warning Event for the refusal"
    )
    assert warnings[0]["message"] == ready["message"]
    assert await kube.secret(SECRET_NAMESPACE, "nocel-key") is None
    assert await apikeys.get_key(operator_db, "nocel-key") is None


async def _warnings(kube: Kube, kind: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in await kube.events(kind, name) if (e["type"], e["reason"]) == ("Warning", reason)]


async def test_deleting_the_apikey_refuses_the_key_and_removes_its_secret(
    operator: OperatorProcess, kube: Kube, operator_db: Database
) -> None:
    d = await declare(kube, "delete")
    started = time.monotonic()
    await kube.delete("ApiKey", d.apikey)
    await wait_for(lambda: refused(operator_db, d.key), what="the key refused", within=30)
    record_latency("ApiKey delete -> key refused", time.monotonic() - started)
    await wait_for(lambda: gone(kube.get("ApiKey", d.apikey)), what="the finalizer released", within=30)
    await wait_for(
        lambda: gone(kube.secret(SECRET_NAMESPACE, d.secret)), what="the Secret removed", within=30
    )
    assert await apikeys.get_key(operator_db, d.apikey) is None


async def test_deleting_the_user_and_the_space_removes_their_rows(
    operator: OperatorProcess, kube: Kube, operator_db: Database
) -> None:
    d = await declare(kube, "cleanup")
    await kube.delete("User", d.user)
    await wait_for(lambda: gone(kube.get("User", d.user)), what="the User's finalizer released", within=30)
    assert await users.get_user(operator_db, d.user) is None
    assert await refused(operator_db, d.key)

    await wait_for(
        lambda: ready_because(kube, "ApiKey", d.apikey, "UserNotFound"),
        what="the ApiKey waiting for its user",
    )
    await kube.delete("Space", d.space)
    await wait_for(lambda: gone(kube.get("Space", d.space)), what="the Space's finalizer released", within=30)
    assert await spaces.get_space(operator_db, d.space) is None
    await kube.delete("ApiKey", d.apikey)
    await wait_for(lambda: gone(kube.get("ApiKey", d.apikey)), what="the ApiKey removed", within=30)


async def test_a_key_declared_before_its_user_comes_soon_after_the_user(
    operator: OperatorProcess, kube: Kube, operator_db: Database
) -> None:
    """The ApiKey's reconcile waits for its User with a short first retry, not the full delay (15 s)
    nor the resync: the key follows its User within a few seconds."""
    await kube.create_object("Space", "early-space", {"displayName": "Early", "deletionPolicy": "Delete"})
    await kube.create_object(
        "ApiKey",
        "early-key",
        {
            "user": "early-user",
            "grants": [{"space": "early-space", "access": "ReadWrite"}],
            "secretRef": {"namespace": SECRET_NAMESPACE, "name": "early-key"},
        },
    )
    await wait_for(partial(ready_because, kube, "ApiKey", "early-key", "UserNotFound"), what="the wait")
    await kube.create_object(
        "User", "early-user", {"email": "early@example.com", "displayName": "Early", "role": "Writer"}
    )
    started = time.monotonic()
    await wait_for(partial(kube.secret_key, SECRET_NAMESPACE, "early-key"), what="the Secret", within=60)
    elapsed = time.monotonic() - started
    record_latency("Secret after its User (key declared first)", elapsed)
    assert elapsed < 4, f"the key waited {elapsed:.1f} s for a User that was there"
