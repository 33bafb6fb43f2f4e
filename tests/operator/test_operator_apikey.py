"""ApiKey objects through the real operator: the Secret, rotation, waiting, drift repair, deletion."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from typing import Any

import pytest

from memory_mcp.operator.handlers import OperatorOptions
from memory_mcp.store import admin, apikeys, identity, spaces
from memory_mcp.store.db import Database
from memory_mcp.store.errors import AuthenticationFailed
from memory_mcp.store.ownership import Owner
from tests.operator.support import (
    OPTIONS,
    USER,
    Cluster,
    RunningOperator,
    eventually,
    key_spec,
    running_operator,
)


async def declare(cluster: Cluster, spec: dict[str, Any] | None = None) -> str:
    """Space alpha, User ada and ApiKey ada-laptop; returns the key from its Secret."""
    await cluster.create("Space", "alpha", {"displayName": "Alpha"})
    await cluster.create("User", "ada", USER)
    await cluster.create("ApiKey", "ada-laptop", spec or key_spec())
    key: str = await eventually(lambda: cluster.secret_key("agents", "ada-key"), what="the key in its Secret")
    await cluster.ready_because("ApiKey", "ada-laptop", "Reconciled")
    return key


async def grants_of(db: Database, key: str) -> dict[str, str]:
    caller = await identity.authenticate(db, key)
    return {g.space.key: g.access.value for g in caller.grants}


async def test_key_is_written_once_to_an_owned_secret(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    key = await declare(cluster)
    apikey = cluster.get("ApiKey", "ada-laptop")
    secret = cluster.secret("agents", "ada-key")
    assert secret is not None
    assert secret["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "memory-mcp"}
    assert secret["metadata"]["annotations"]["memory-mcp.io/api-key"] == "ada-laptop"
    assert secret["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "memory-mcp.io/v1alpha1",
            "kind": "ApiKey",
            "name": "ada-laptop",
            "uid": apikey["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    status = apikey["status"]
    assert status["keyPrefix"] == key.split("_")[1]
    assert (status["secretName"], status["rotationGeneration"], status["observedGeneration"]) == (
        "ada-key",
        0,
        1,
    )
    assert status["defaultSpace"] == "alpha"
    assert await grants_of(db, key) == {"alpha": "ReadWrite"}
    # Only the hash reaches the database; the key appears nowhere in it.
    assert operator.sql("SELECT key_hash FROM api_keys") == [(hashlib.sha256(key.encode()).hexdigest(),)]
    assert operator.sql(
        "SELECT count(*) FROM audit_events WHERE details::text LIKE %(k)s", k=f"%{key[-20:]}%"
    ) == [(0,)]

    await cluster.create("Space", "handbook", {"displayName": "Handbook"})
    await eventually(lambda: spaces.get_space(db, "handbook"), what="the second space")
    grants = [{"space": "alpha", "access": "ReadWrite"}, {"space": "handbook", "access": "Read"}]
    generation = await cluster.update("ApiKey", "ada-laptop", {"grants": grants})
    await eventually(
        lambda: cluster.ready("ApiKey", "ada-laptop")["observedGeneration"] == generation, what="the update"
    )
    assert await grants_of(db, key) == {"alpha": "ReadWrite", "handbook": "Read"}
    await asyncio.sleep(3 * OPTIONS.resync_interval)  # several resyncs
    assert cluster.secret_key("agents", "ada-key") == key
    assert len(cluster.requests("POST", "/secrets")) == 1
    assert cluster.requests("PATCH", "/secrets") == []
    events = await eventually(lambda: cluster.events("Reconciled"), what="Events")
    messages = [e["message"] for e in events]
    assert "Issued a new key for user 'ada'." in messages
    assert "Set grants to alpha=ReadWrite, handbook=Read (were alpha=ReadWrite)." in messages
    assert all(key not in m for m in messages)


async def test_key_survives_an_operator_restart(
    cluster: Cluster, db: Database, db_urls: tuple[str, str]
) -> None:
    async with running_operator(cluster, db_urls):
        key = await declare(cluster)
    async with running_operator(cluster, db_urls):
        await asyncio.sleep(3 * OPTIONS.resync_interval)
        assert cluster.secret_key("agents", "ada-key") == key
        assert await grants_of(db, key) == {"alpha": "ReadWrite"}
    assert len(cluster.requests("POST", "/secrets")) == 1


async def test_rotation_replaces_the_key(operator: RunningOperator, cluster: Cluster, db: Database) -> None:
    old = await declare(cluster)
    await cluster.update("ApiKey", "ada-laptop", {"rotationGeneration": 1})
    new = await eventually(
        lambda: (k := cluster.secret_key("agents", "ada-key")) != old and k, what="the rotated key"
    )
    # The status is written after the hash changed (the Secret before it): wait for it first.
    status = await eventually(
        lambda: (s := cluster.get("ApiKey", "ada-laptop")["status"])["rotationGeneration"] == 1 and s,
        what="status of the rotation",
    )
    with pytest.raises(AuthenticationFailed):
        await identity.authenticate(db, old)
    assert await grants_of(db, new) == {"alpha": "ReadWrite"}
    assert status["keyPrefix"] == new.split("_")[1]
    secret = cluster.secret("agents", "ada-key")
    assert (
        secret is not None and secret["metadata"]["annotations"]["memory-mcp.io/rotation-generation"] == "1"
    )
    await asyncio.sleep(3 * OPTIONS.resync_interval)
    assert cluster.secret_key("agents", "ada-key") == new


async def test_a_missing_space_is_waited_for(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    await cluster.create("User", "ada", USER)
    await cluster.create(
        "ApiKey", "ada-laptop", key_spec(grants=[{"space": "later", "access": "Read"}], defaultSpace=None)
    )
    ready = await cluster.ready_because("ApiKey", "ada-laptop", "SpaceNotFound")
    assert ready["status"] == "False"
    assert (
        ready["message"]
        == "Granted space 'later' does not exist; declare it as a Space and this key follows."
    )
    assert cluster.secret("agents", "ada-key") is None
    await cluster.create("Space", "later", {"displayName": "Later"})
    await eventually(
        lambda: cluster.ready("ApiKey", "ada-laptop")["status"] == "True", what="the key to follow"
    )
    key = cluster.secret_key("agents", "ada-key")
    assert key is not None and await grants_of(db, key) == {"later": "Read"}


@pytest.mark.parametrize(
    ("spec", "reason", "message"),
    [
        (
            key_spec(defaultSpace="elsewhere"),
            "InvalidSpec",
            "spec.defaultSpace: 'elsewhere' must be one of the granted spaces",
        ),
        (
            key_spec(user="nobody"),
            "UserNotFound",
            "User 'nobody' does not exist; declare it and this key follows.",
        ),
    ],
)
async def test_refused_keys_say_why(
    operator: RunningOperator, cluster: Cluster, db: Database, spec: dict[str, Any], reason: str, message: str
) -> None:
    await cluster.create("Space", "alpha", {"displayName": "Alpha"})
    await cluster.create("User", "ada", USER)
    await cluster.create("ApiKey", "ada-laptop", spec)
    ready = await cluster.ready_because("ApiKey", "ada-laptop", reason)
    assert (ready["status"], ready["message"]) == ("False", message)
    assert cluster.secret("agents", "ada-key") is None
    assert await apikeys.get_key(db, "ada-laptop") is None


async def test_resync_repairs_rows_changed_behind_its_back(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    key = await declare(cluster)
    await asyncio.sleep(OPTIONS.resync_interval)  # let the creation settle: only the resync may repair
    await cluster.create("Space", "secret-plans", {"displayName": "Secret plans"})
    await eventually(lambda: spaces.get_space(db, "secret-plans"), what="the second space")

    operator.sql(
        "INSERT INTO key_grants (key_id, space_id, access) SELECT k.id, s.id, 'ReadWrite' "
        "FROM api_keys k, spaces s WHERE k.name = 'ada-laptop' AND s.key = 'secret-plans'"
    )
    assert await grants_of(db, key) == {"alpha": "ReadWrite", "secret-plans": "ReadWrite"}
    await eventually(lambda: _grants_are(db, key, {"alpha": "ReadWrite"}), what="the hand-made grant removed")

    operator.sql("DELETE FROM api_keys WHERE name = 'ada-laptop'")
    await eventually(lambda: _grants_are(db, key, {"alpha": "ReadWrite"}), what="the row restored, same key")

    assert cluster.secret_key("agents", "ada-key") == key
    assert len(cluster.requests("POST", "/secrets")) == 1
    repairs = [
        "set grants to alpha=ReadWrite (were alpha=ReadWrite, secret-plans=ReadWrite)",
        "restored the key from Secret agents/ada-key; the database had lost it",
    ]

    def warnings() -> list[str]:
        return [e["message"] for e in cluster.events("DriftRepaired")]

    def unreported() -> list[str]:
        # A resync that overlaps two of the edits above repairs both and names both in one Warning.
        return [r for r in repairs if not any(r in message for message in warnings())]

    with contextlib.suppress(AssertionError):
        await eventually(lambda: not unreported(), what="a Warning naming each repair")
    assert not unreported(), f"repairs never reported: {unreported()}; the Warnings: {warnings()}"
    assert all(m.startswith("The database had drifted: ") and m.endswith(".") for m in warnings())


async def test_a_hash_changed_by_hand_is_put_back(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    key = await declare(cluster)
    await asyncio.sleep(OPTIONS.resync_interval)
    operator.sql("UPDATE api_keys SET key_hash = md5('x') WHERE name = 'ada-laptop'")
    await eventually(lambda: _grants_are(db, key, {"alpha": "ReadWrite"}), what="the hash put back")
    repaired = "restored the key held in Secret agents/ada-key; the database had another one"
    await eventually(
        lambda: any(repaired in e["message"] for e in cluster.events("DriftRepaired")), what="the Warning"
    )


async def test_a_revoked_key_stays_revoked_until_it_is_rotated(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    # `memory-mcp key revoke` is the emergency stop for a leaked key of a manifest: the resync must
    # not bring the same secret back, and a raised rotationGeneration is the declared way out.
    key = await declare(cluster)
    await asyncio.sleep(OPTIONS.resync_interval)
    assert await admin.revoke_key(db, "ada-laptop") == (True, Owner.MANIFEST)
    ready = await cluster.ready_because("ApiKey", "ada-laptop", "Revoked")
    assert ready["status"] == "False"
    assert "and stays revoked; raise spec.rotationGeneration to issue a new secret" in ready["message"]
    await asyncio.sleep(3 * OPTIONS.resync_interval)  # several resyncs
    with pytest.raises(AuthenticationFailed):
        await identity.authenticate(db, key)
    assert cluster.secret_key("agents", "ada-key") == key
    assert cluster.events("DriftRepaired") == []
    assert len(cluster.events("Revoked")) == 1

    await cluster.update("ApiKey", "ada-laptop", {"rotationGeneration": 1})
    new = await eventually(
        lambda: (k := cluster.secret_key("agents", "ada-key")) != key and k, what="a new secret"
    )
    await cluster.ready_because("ApiKey", "ada-laptop", "Reconciled")
    assert await grants_of(db, new) == {"alpha": "ReadWrite"}
    with pytest.raises(AuthenticationFailed):
        await identity.authenticate(db, key)


async def _grants_are(db: Database, key: str, expected: dict[str, str]) -> bool:
    try:
        return await grants_of(db, key) == expected
    except AuthenticationFailed:
        return False


async def test_a_deleted_secret_gets_a_new_key(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    old = await declare(cluster)
    await asyncio.sleep(OPTIONS.resync_interval)
    await cluster.delete_secret("agents", "ada-key")
    new = await eventually(lambda: cluster.secret_key("agents", "ada-key"), what="a new Secret")
    assert new != old

    async def old_key_refused() -> bool:
        # The Secret is written before the hash changes (a crash must never leave a hash whose key
        # nobody has), so the old key stops a moment after the new Secret appears.
        try:
            await identity.authenticate(db, old)
        except AuthenticationFailed:
            return True
        return False

    await eventually(old_key_refused, what="the old key refused")
    assert await grants_of(db, new) == {"alpha": "ReadWrite"}
    drift = await eventually(lambda: cluster.events("DriftRepaired"), what="the warning")
    assert drift[0]["type"] == "Warning"
    assert "Secret agents/ada-key was gone" in drift[0]["message"]


async def test_deleting_the_apikey_stops_the_key_and_removes_its_secret(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    key = await declare(cluster)
    await cluster.delete("ApiKey", "ada-laptop")
    await eventually(lambda: not cluster.exists("ApiKey", "ada-laptop"), what="finalizer released")
    assert cluster.secret("agents", "ada-key") is None
    assert await apikeys.get_key(db, "ada-laptop") is None
    with pytest.raises(AuthenticationFailed):
        await identity.authenticate(db, key)


async def test_secrets_it_does_not_own_are_left_alone(
    cluster: Cluster, db: Database, db_urls: tuple[str, str]
) -> None:
    options = OperatorOptions(OPTIONS.resync_interval, OPTIONS.retry_delay, frozenset({"agents", "tools"}))
    await cluster.create_secret("agents", "taken", {"api-key": "someone else's"})
    async with running_operator(cluster, db_urls, options):
        await cluster.create("Space", "alpha", {"displayName": "Alpha"})
        await cluster.create("User", "ada", USER)
        await cluster.create("ApiKey", "taken", key_spec(secretRef={"namespace": "agents", "name": "taken"}))
        await cluster.create(
            "ApiKey", "elsewhere", key_spec(secretRef={"namespace": "kube-system", "name": "k"})
        )
        taken = await cluster.ready_because("ApiKey", "taken", "SecretConflict")
        elsewhere = await cluster.ready_because("ApiKey", "elsewhere", "SecretNamespaceNotAllowed")
    assert taken["status"] == "False"
    assert taken["message"] == (
        "Secret agents/taken exists but does not belong to ApiKey 'taken'; it is left untouched. "
        "Delete it or point secretRef at another name."
    )
    assert cluster.secret_key("agents", "taken") == "someone else's"
    assert elsewhere["status"] == "False"
    assert elsewhere["message"] == (
        "The operator may write Secrets only in agents, tools, not in 'kube-system'; "
        "point secretRef at one of those namespaces."
    )
    assert cluster.secret("kube-system", "k") is None
    assert await apikeys.get_key(db, "taken") is None
