"""Space objects through the real operator: status, updates, drift, deletion policies."""

from __future__ import annotations

import asyncio

from memory_mcp.store import identity, memories, spaces
from memory_mcp.store.db import Database
from tests.operator.support import OPTIONS, Cluster, RunningOperator, eventually

SPACE = {"displayName": "Team Alpha", "description": "Decisions of team alpha", "deletionPolicy": "Retain"}


async def test_space_is_created_updated_and_reports_status(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    await cluster.create("Space", "alpha", SPACE)
    ready = await eventually(lambda: cluster.ready("Space", "alpha"), what="Ready on Space alpha")
    assert (ready["status"], ready["reason"], ready["observedGeneration"]) == ("True", "Reconciled", 1)
    status = cluster.get("Space", "alpha")["status"]
    assert (status["observedGeneration"], status["memoryCount"], status["documentCount"]) == (1, 0, 0)
    assert (await spaces.get_space(db, "alpha")).display_name == "Team Alpha"  # type: ignore[union-attr]
    assert "memory-mcp.io/finalizer" in cluster.get("Space", "alpha")["metadata"]["finalizers"]
    created = await eventually(lambda: cluster.events("Reconciled"), what="an Event")
    assert created[0]["message"] == "Created space 'alpha'."

    generation = await cluster.update("Space", "alpha", {"displayName": "Team A"})
    await eventually(
        lambda: cluster.get("Space", "alpha")["status"]["observedGeneration"] == generation,
        what="generation 2",
    )
    assert (await spaces.get_space(db, "alpha")).display_name == "Team A"  # type: ignore[union-attr]


async def test_a_spaces_own_file_limits_are_stored_and_a_change_is_reported(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    await cluster.create("Space", "manuals", {**SPACE, "quotas": {"maxPdfPages": 2}})
    await eventually(lambda: cluster.ready("Space", "manuals"), what="Space manuals ready")
    limits = "SELECT max_pdf_pages, max_media_seconds FROM spaces WHERE key = 'manuals'"
    assert operator.sql(limits) == [(2, None)]
    generation = await cluster.update(
        "Space", "manuals", {"quotas": {"maxPdfPages": 5000, "maxMediaSeconds": 900}}
    )
    await eventually(
        lambda: cluster.get("Space", "manuals")["status"]["observedGeneration"] == generation,
        what="generation 2",
    )
    assert operator.sql(limits) == [(5000, 900)]
    updated = [e["message"] for e in cluster.events("Reconciled") if e["message"].startswith("Updated")]
    assert updated == [
        "Updated space 'manuals': quotas.maxPdfPages 2 -> 5000, quotas.maxMediaSeconds none -> 900."
    ]

    await cluster.update("Space", "manuals", {"quotas": {"maxPdfPages": 0}})
    refused = await cluster.ready_because("Space", "manuals", "InvalidSpec")
    assert refused["message"] == "spec.quotas.maxPdfPages: must be an integer from 1 to 2147483647, got 0"
    assert operator.sql(limits) == [(5000, 900)]


async def test_invalid_space_is_refused_with_the_field(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    await cluster.create("Space", "beta", {**SPACE, "deletionPolicy": "Keep"})
    ready = await eventually(lambda: cluster.ready("Space", "beta"), what="Ready on Space beta")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert ready["message"] == "spec.deletionPolicy: must be 'Retain' or 'Delete', got 'Keep'"
    warning = await eventually(lambda: cluster.events("InvalidSpec"), what="a Warning")
    assert warning[0]["type"] == "Warning"
    assert await spaces.get_space(db, "beta") is None
    await cluster.update("Space", "beta", {"deletionPolicy": "Delete"})
    await eventually(lambda: cluster.ready("Space", "beta")["status"] == "True", what="Space beta fixed")


async def test_resync_restores_a_space_deleted_behind_its_back(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    await cluster.create("Space", "alpha", SPACE)
    await eventually(lambda: cluster.ready("Space", "alpha"), what="Space alpha ready")
    await asyncio.sleep(OPTIONS.resync_interval)  # let the creation settle: only the resync may repair
    operator.sql("DELETE FROM spaces WHERE key = 'alpha'")
    assert await spaces.get_space(db, "alpha") is None
    await eventually(lambda: spaces.get_space(db, "alpha"), what="space restored by the resync")
    drift = await eventually(lambda: cluster.events("DriftRepaired"), what="DriftRepaired event")
    assert drift[0]["message"] == "The database had drifted: created space 'alpha'."


async def seed(cluster: Cluster, db: Database) -> None:
    """A user with a key on alpha who saves one memory there."""
    await cluster.create("User", "ada", {"email": "ada@example.com", "displayName": "Ada", "role": "Writer"})
    await cluster.create(
        "ApiKey",
        "ada-key",
        {
            "user": "ada",
            "grants": [{"space": "alpha", "access": "ReadWrite"}],
            "secretRef": {"namespace": "agents", "name": "ada-key"},
        },
    )
    await cluster.ready_because("ApiKey", "ada-key", "Reconciled")
    key = cluster.secret_key("agents", "ada-key")
    assert key is not None
    caller = await identity.authenticate(db, key)
    await memories.save_memory(db, identity.resolve_space(caller, "alpha"), "Deploys happen on Tuesdays.")


async def test_retain_keeps_the_data_for_a_later_space(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    await cluster.create("Space", "alpha", SPACE)
    await eventually(lambda: cluster.ready("Space", "alpha"), what="Space alpha ready")
    await seed(cluster, db)
    await cluster.delete("Space", "alpha")
    await eventually(lambda: not cluster.exists("Space", "alpha"), what="finalizer released")
    assert await spaces.get_space(db, "alpha") is None
    assert operator.sql("SELECT count(*) FROM spaces WHERE key = 'alpha' AND detached_at IS NOT NULL") == [
        (1,)
    ]
    await cluster.create("Space", "alpha", SPACE)
    ready = await eventually(lambda: cluster.ready("Space", "alpha"), what="Space alpha back")
    assert ready["status"] == "True"
    assert cluster.get("Space", "alpha")["status"]["memoryCount"] == 1


async def test_delete_policy_removes_the_data(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    await cluster.create("Space", "alpha", {**SPACE, "deletionPolicy": "Delete"})
    await eventually(lambda: cluster.ready("Space", "alpha"), what="Space alpha ready")
    await seed(cluster, db)
    await cluster.delete("Space", "alpha")
    await eventually(lambda: not cluster.exists("Space", "alpha"), what="finalizer released")
    assert operator.sql("SELECT count(*) FROM spaces WHERE key = 'alpha'") == [(0,)]
    assert operator.sql("SELECT count(*) FROM memories") == [(0,)]
    # The key that granted it now waits for the space to come back.
    waiting = await cluster.ready_because("ApiKey", "ada-key", "SpaceNotFound")
    assert waiting["status"] == "False"
