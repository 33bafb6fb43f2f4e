"""The operator leaves what the command line made alone: no take-over, no resync, no deletion."""

from __future__ import annotations

import asyncio

from memory_mcp.store import admin, apikeys, spaces, users
from memory_mcp.store.db import Database
from tests.operator.support import OPTIONS, Cluster, RunningOperator, eventually, key_spec

CLI_MESSAGE = "is managed by the memory-mcp command line; change it there"


async def test_objects_made_on_the_command_line_are_never_touched(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    await admin.create_space(db, "alpha", "Made by hand", deletion_policy="Delete")
    await admin.create_user(db, "ada", "ada@example.com", "Reader", "Ada by hand")
    await admin.create_user(db, "bob", "bob@example.com", "Writer", None)
    grants = [admin.parse_grant("alpha=Read")]
    await admin.create_key(db, "bob-key", "bob", grants)

    await cluster.create("Space", "alpha", {"displayName": "Declared", "deletionPolicy": "Delete"})
    await cluster.create("User", "ada", {"email": "ada@example.com", "displayName": "Ada", "role": "Writer"})
    await cluster.create("ApiKey", "bob-key", key_spec(user="bob"))
    for kind, name, what in (
        ("Space", "alpha", "space"),
        ("User", "ada", "user"),
        ("ApiKey", "bob-key", "api key"),
    ):
        refused = await cluster.ready_because(kind, name, "Conflict")
        assert refused["status"] == "False"
        assert refused["message"].startswith(f"{what} '{name}' {CLI_MESSAGE}")

    # Several resyncs later the database still holds what the command line made.
    await asyncio.sleep(OPTIONS.resync_interval * 4)
    assert (await spaces.get_space(db, "alpha")).display_name == "Made by hand"  # type: ignore[union-attr]
    ada = await users.get_user(db, "ada")
    assert ada is not None and (ada.display_name, ada.role.value) == ("Ada by hand", "Reader")
    found = await apikeys.get_key(db, "bob-key")
    assert found is not None and found[1] == {"alpha": "Read"}
    assert cluster.secret("agents", "ada-key") is None  # no key was issued for the refused ApiKey

    # Deleting the objects deletes nothing that the command line made.
    for kind, name in (("ApiKey", "bob-key"), ("User", "ada"), ("Space", "alpha")):
        await cluster.delete(kind, name)
        await eventually(lambda kind=kind, name=name: not cluster.exists(kind, name), what=f"{kind} released")
    assert await spaces.get_space(db, "alpha") is not None
    assert await users.get_user(db, "ada") is not None
    assert await apikeys.get_key(db, "bob-key") is not None
