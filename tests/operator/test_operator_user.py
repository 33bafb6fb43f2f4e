"""User objects through the real operator: roles, deactivation, drift, conflicts, deletion."""

from __future__ import annotations

import asyncio

import pytest

from memory_mcp.store import identity, users
from memory_mcp.store.db import Database
from memory_mcp.store.errors import AuthenticationFailed
from tests.operator.support import OPTIONS, Cluster, RunningOperator, eventually

ADA = {"email": "ada@example.com", "displayName": "Ada Lovelace", "role": "Writer", "active": True}
KEY = {
    "user": "ada",
    "grants": [{"space": "alpha", "access": "ReadWrite"}],
    "secretRef": {"namespace": "agents", "name": "ada-key"},
}


async def ada_with_a_key(cluster: Cluster) -> str:
    await cluster.create("Space", "alpha", {"displayName": "Alpha"})
    await cluster.create("User", "ada", ADA)
    await cluster.create("ApiKey", "ada-key", KEY)
    await cluster.ready_because("ApiKey", "ada-key", "Reconciled")
    key = cluster.secret_key("agents", "ada-key")
    assert key is not None
    return key


async def test_user_role_and_deactivation_apply_to_the_key(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    key = await ada_with_a_key(cluster)
    ready = await eventually(lambda: cluster.ready("User", "ada"), what="Ready on User ada")
    assert (ready["status"], ready["message"]) == ("True", "User 'ada' is active as Writer.")
    user = await users.get_user(db, "ada")
    assert user is not None and cluster.get("User", "ada")["status"]["userId"] == str(user.id)
    assert (await identity.authenticate(db, key)).grants[0].effective.value == "ReadWrite"

    await cluster.update("User", "ada", {"role": "Reader"})
    await eventually(
        lambda: cluster.ready("User", "ada")["message"] == "User 'ada' is active as Reader.", what="Reader"
    )
    assert (await identity.authenticate(db, key)).grants[0].effective.value == "Read"

    generation = await cluster.update("User", "ada", {"active": False})
    ready = await eventually(
        lambda: (
            cluster.ready("User", "ada")["observedGeneration"] == generation and cluster.ready("User", "ada")
        ),
        what="deactivation observed",
    )
    assert ready["message"] == "User 'ada' is deactivated: none of their keys work."
    with pytest.raises(AuthenticationFailed):
        await identity.authenticate(db, key)
    events = await eventually(lambda: cluster.events("Reconciled"), what="Events")
    assert "Deactivated user 'ada': none of their keys work any more." in [e["message"] for e in events]


async def test_resync_undoes_a_reactivation_by_hand(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    key = await ada_with_a_key(cluster)
    generation = await cluster.update("User", "ada", {"active": False})
    await eventually(lambda: cluster.ready("User", "ada").get("observedGeneration") == generation)
    # Either the update handler or a resync applies a change first; let both finish, so that only
    # the resync is left to notice what is done by hand next.
    await asyncio.sleep(OPTIONS.resync_interval)
    operator.sql("UPDATE users SET active = true WHERE name = 'ada'")
    await eventually(
        lambda: operator.sql("SELECT active FROM users WHERE name = 'ada'") == [(False,)],
        what="the resync to deactivate ada again",
    )
    with pytest.raises(AuthenticationFailed):
        await identity.authenticate(db, key)
    drift = await eventually(lambda: cluster.events("DriftRepaired"), what="DriftRepaired")
    assert [e["message"] for e in drift] == [
        "The database had drifted: deactivated user 'ada': none of their keys work any more."
    ]


async def test_email_taken_by_another_user_is_a_conflict(operator: RunningOperator, cluster: Cluster) -> None:
    await cluster.create("User", "ada", ADA)
    await eventually(lambda: cluster.ready("User", "ada"), what="ada")
    await cluster.create("User", "imposter", {**ADA, "displayName": "Not Ada"})
    ready = await eventually(lambda: cluster.ready("User", "imposter"), what="Ready on imposter")
    assert (ready["status"], ready["reason"]) == ("False", "Conflict")
    assert ready["message"] == (
        "email 'ada@example.com' already belongs to user 'ada'; give each User its own email address."
    )


async def test_deleting_a_user_removes_them_and_their_keys(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    key = await ada_with_a_key(cluster)
    await cluster.delete("User", "ada")
    await eventually(lambda: not cluster.exists("User", "ada"), what="finalizer released")
    assert await users.get_user(db, "ada") is None
    with pytest.raises(AuthenticationFailed):
        await identity.authenticate(db, key)
    # The ApiKey object is still declared: it now waits for its user.
    ready = await cluster.ready_because("ApiKey", "ada-key", "UserNotFound")
    assert ready["message"] == "User 'ada' does not exist; declare it and this key follows."
