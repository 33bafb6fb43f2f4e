"""`memory-mcp space|user|key` and `--version` as a person runs them: real processes, a real database."""

from __future__ import annotations

import json
import shlex
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from sqlalchemy.engine import make_url

from memory_mcp.apply import apply_manifests, load_manifests
from memory_mcp.embedder.client import Embedder
from memory_mcp.store import audit, identity, memories, spaces
from memory_mcp.store.db import Database
from memory_mcp.store.embedded import EmbeddedPostgres
from memory_mcp.store.errors import AuthenticationFailed
from tests.cli_support import Admin, cli
from tests.factories import caller_for
from tests.server.conftest import mcp_session, run_server

API_VERSION = "memory-mcp.io/v1alpha1"


@pytest.fixture
def admin(db_urls: tuple[str, str]) -> Admin:
    return Admin(db_urls[1])


def masked(url: str) -> str:
    """A database URL as the command line repeats it: without its password."""
    return make_url(url).render_as_string(hide_password=True)


def obj(kind: str, name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}


def team_manifests() -> str:
    """A space, a user and a key, as `memory-mcp apply -f` reads them."""
    return yaml.safe_dump_all(
        [
            obj("Space", "team-a", displayName="Team A"),
            obj("User", "ada", email="ada@example.com", displayName="Ada", role="Writer"),
            obj(
                "ApiKey",
                "ada-laptop",
                user="ada",
                grants=[{"space": "team-a", "access": "ReadWrite"}],
                secretRef={"namespace": "agents", "name": "ada-key"},
            ),
        ]
    )


async def declared_team(db: Database) -> None:
    """What `memory-mcp apply` makes: a space, a user and a key that belong to their manifests."""
    assert (await apply_manifests(db, load_manifests(team_manifests(), "team.yaml"))).ok


def test_version_is_the_installed_distribution() -> None:
    done = cli("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"memory-mcp {version('memory-mcp')}\n"


def test_help_shows_flags_without_type_labels() -> None:
    commands = [
        [],
        ["space"],
        ["space", "create"],
        ["space", "delete"],
        ["space", "list"],
        ["user", "create"],
        ["key", "create"],
        ["export"],
        ["import"],
        ["backfill"],
    ]
    for command in commands:
        done = cli(*command, "--help")
        assert done.returncode == 0, done.stderr
        assert "<bool>" not in done.stdout, command
        assert "--help" in done.stdout and "Show this message and exit." in done.stdout
    assert "-y, --yes" in cli("space", "delete", "--help").stdout
    assert "--grant SPACE=ACCESS" in cli("key", "create", "--help").stdout


async def test_spaces_users_and_keys_from_creation_to_revocation(admin: Admin, db: Database) -> None:
    created = admin.ok("space", "create", "team-b", "--name", "Team B", "--description", "Bees")
    assert "created space 'team-b' (deletion policy Retain)" in created.stderr
    assert "space 'team-b' already exists" in admin.refused("space", "create", "team-b")
    assert "key: must be 1-63 lowercase letters" in admin.refused("space", "create", "Team_B")
    (space,) = admin.listing("space")
    assert {k: space[k] for k in ("key", "display_name", "description", "managed_by", "memories")} == {
        "key": "team-b",
        "display_name": "Team B",
        "description": "Bees",
        "managed_by": "cli",
        "memories": 0,
    }

    admin.ok("user", "create", "bob", "--email", "bob@example.com", "--role", "Writer")
    admin.ok(
        "user", "create", "eve", "--email", "eve@example.com", "--role", "Reader", "--display-name", "Eve"
    )
    assert "email 'bob@example.com' already belongs to user 'bob'" in admin.refused(
        "user", "create", "bob2", "--email", "bob@example.com", "--role", "Writer"
    )
    users = {u["name"]: u for u in admin.listing("user")}
    assert {n: (u["role"], u["active"], u["managed_by"]) for n, u in users.items()} == {
        "bob": ("Writer", True, "cli"),
        "eve": ("Reader", True, "cli"),
    }

    made = admin.ok(
        "key", "create", "bob-laptop", "--user", "bob", "--grant", "team-b=ReadWrite",
        "--default-space", "team-b", "--expires", "2099-01-31",
    )  # fmt: skip
    plaintext = made.stdout.strip()
    assert plaintext.startswith("mmk_") and plaintext not in made.stderr
    caller = await identity.authenticate(db, plaintext)
    assert caller.user.name == "bob" and [(g.space.key, g.access.value) for g in caller.grants] == [
        ("team-b", "ReadWrite")
    ]
    assert "grants[0].access: must be" in admin.refused(
        "key", "create", "k2", "--user", "bob", "--grant", "team-b=Admin"
    )
    assert "space 'nowhere' not found" in admin.refused(
        "key", "create", "k2", "--user", "bob", "--grant", "nowhere=Read"
    )
    assert "--expires: must be a date" in admin.refused(
        "key", "create", "k2", "--user", "bob", "--grant", "team-b=Read", "--expires", "soon"
    )
    # A key that expired before it was made would never work: refused, not created.
    assert "--expires: must be in the future, got '2020-01-31'" in admin.refused(
        "key", "create", "k2", "--user", "bob", "--grant", "team-b=Read", "--expires", "2020-01-31"
    )
    assert "k2" not in {k["name"] for k in admin.listing("key")}
    admin.ok("key", "create", "eve-key", "--user", "eve", "--grant", "team-b=Read")
    listed = admin.ok("key", "list", "--json").stdout
    assert plaintext not in listed
    keys = {k["name"]: k for k in json.loads(listed)}
    assert keys["bob-laptop"]["grants"] == {"team-b": "ReadWrite"}
    assert keys["bob-laptop"]["default_space"] == "team-b"
    assert keys["bob-laptop"]["expires_at"] == "2099-01-31T00:00:00+00:00"
    assert keys["eve-key"]["revoked_at"] is None

    table = admin.ok("key", "list").stdout
    assert "bob-laptop" in table and "team-b=ReadWrite" in table and "┃" in table

    assert (
        "deactivated user 'bob': none of their keys work any more"
        in admin.ok("user", "deactivate", "bob").stderr
    )
    with pytest.raises(AuthenticationFailed):
        await identity.authenticate(db, plaintext)
    assert "user 'bob' was already deactivated" in admin.ok("user", "deactivate", "bob").stderr
    admin.ok("user", "activate", "bob")
    assert (await identity.authenticate(db, plaintext)).user.active

    assert "revoked key 'bob-laptop'" in admin.ok("key", "revoke", "bob-laptop").stderr
    with pytest.raises(AuthenticationFailed):
        await identity.authenticate(db, plaintext)
    assert "already revoked" in admin.ok("key", "revoke", "bob-laptop").stderr
    assert "api key 'nobody' not found" in admin.refused("key", "revoke", "nobody")
    assert "user 'nobody' not found" in admin.refused("user", "deactivate", "nobody")


async def test_objects_of_manifests_are_refused_with_their_owner(admin: Admin, db: Database) -> None:
    await declared_team(db)
    owner = "is managed by apply/the operator; change it in its manifest"
    assert f"space 'team-a' {owner}" in admin.refused("space", "delete", "team-a", "--yes")
    assert f"space 'team-a' {owner}" in admin.refused("space", "create", "team-a")
    assert f"user 'ada' {owner}" in admin.refused("user", "deactivate", "ada")
    assert f"user 'ada' {owner}" in admin.refused(
        "user", "create", "ada", "--email", "a@b.io", "--role", "Reader"
    )
    # Revoking is the one change the command line makes to a key of a manifest: it stops a leaked key
    # now, and applying the manifest again does not bring the secret back.
    revoked = " ".join(admin.ok("key", "revoke", "ada-laptop").stderr.split())
    assert "revoked key 'ada-laptop'" in revoked
    assert (
        "key 'ada-laptop' is managed by apply/the operator: it stays revoked (its ApiKey reports Revoked); "
        "raise the ApiKey's spec.rotationGeneration to issue a new secret, or remove it" in revoked
    )
    again = await apply_manifests(db, load_manifests(team_manifests(), "team.yaml"))
    assert not again.ok
    assert [r.describe() for r in again.results][-1].startswith(
        "apikey/ada-laptop: applied, not usable (Revoked): Key 'ada-laptop' of user 'ada' was revoked at "
    )
    assert {k["name"]: k["revoked_at"] is not None for k in admin.listing("key")}["ada-laptop"]
    assert await spaces.get_space(db, "team-a") is not None
    assert {s["key"]: s["managed_by"] for s in admin.listing("space")} == {"team-a": "manifest"}
    table = admin.ok("user", "list").stdout
    assert "apply/operator" in table

    # A key of its own for a declared user on a declared space changes neither of them.
    plaintext = admin.ok("key", "create", "ada-cli", "--user", "ada", "--grant", "team-a=Read").stdout.strip()
    assert (await identity.authenticate(db, plaintext)).user.name == "ada"

    # And the other way round: a manifest cannot take over what the command line made.
    admin.ok("space", "create", "team-c", "--name", "Mine")
    report = await apply_manifests(
        db, load_manifests(yaml.safe_dump(obj("Space", "team-c", displayName="Theirs")), "t.yaml")
    )
    assert not report.ok
    assert report.results[0].outcome.reason == "Conflict"
    assert "space 'team-c' is managed by the memory-mcp command line" in report.results[0].outcome.message
    assert (await spaces.get_space(db, "team-c")).display_name == "Mine"  # type: ignore[union-attr]


async def save_one(db: Database, space: str, content: str) -> None:
    caller = await caller_for(db, grants={space: "ReadWrite"})
    ctx = identity.resolve_space(caller, space)
    await memories.save_memory(db, ctx, content)


async def test_deleting_a_space_follows_its_policy_and_asks_first(admin: Admin, db: Database) -> None:
    admin.ok("space", "create", "keep", "--deletion-policy", "Retain")
    admin.ok("space", "create", "drop", "--deletion-policy", "Delete")
    await save_one(db, "keep", "The keep space holds this")
    await save_one(db, "drop", "The drop space holds this")

    asked = admin.run("space", "delete", "drop", stdin="n\n")
    assert asked.returncode == 1
    assert "Delete space 'drop'? Deletion policy Delete: its 1 memories and 0 documents are removed" in (
        " ".join(asked.stdout.split())
    )
    assert "nothing deleted" in asked.stderr
    assert await spaces.space_counts(db, "drop") == (1, 0)  # a memory saved alone is no document

    admin.ok("space", "delete", "drop", stdin="y\n")
    assert await spaces.get_space(db, "drop") is None
    assert "drop" not in {s["key"] for s in admin.listing("space")}

    detached = admin.ok("space", "delete", "keep", "--yes")
    assert "detached space 'keep'; its data is kept" in detached.stderr
    (kept,) = admin.listing("space")
    assert (kept["key"], kept["detached"], kept["memories"]) == ("keep", True, 1)
    assert "space 'keep' not found" in admin.refused("space", "delete", "keep", "--yes")
    assert "restored retained space 'keep'" in admin.ok("space", "create", "keep").stderr
    assert await spaces.space_counts(db, "keep") == (1, 0)


async def test_commands_work_beside_a_running_server_on_the_same_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    held = EmbeddedPostgres(data_dir)  # what `memory-mcp serve` holds while it runs
    held.start()
    try:
        done = cli("space", "create", "beside", "--data-dir", str(data_dir))
        assert done.returncode == 0, done.stderr
        listed = cli("space", "list", "--json", "--data-dir", str(data_dir))
        assert listed.returncode == 0, listed.stderr
        assert [s["key"] for s in json.loads(listed.stdout)] == ["beside"]
        db = Database(held.app_url, pool_size=1)
        try:
            assert await spaces.get_space(db, "beside") is not None  # the server's PostgreSQL saw it
        finally:
            await db.close()
    finally:
        held.stop()


async def test_grants_on_an_existing_key_apply_to_its_next_request(
    admin: Admin, db: Database, db_urls: tuple[str, str], embedder: Embedder
) -> None:
    admin.ok("space", "create", "alpha")
    admin.ok("user", "create", "cy", "--email", "cy@example.com", "--role", "Writer")
    key = admin.ok("key", "create", "cy-key", "--user", "cy", "--grant", "alpha=ReadWrite").stdout.strip()
    # A new space says how to grant it; without a bootstrap key the line names a placeholder.
    made = " ".join(admin.ok("space", "create", "beta").stderr.split())
    assert f"memory-mcp key grant KEY beta=ReadWrite --database-url {shlex.quote(masked(admin.url))}" in made

    async with (
        run_server(db_urls[0], embedder) as server,
        mcp_session(server, key) as s,
        httpx2.AsyncClient(base_url=server.base, headers={"Authorization": f"Bearer {key}"}) as http,
    ):

        async def visible() -> tuple[list[str], list[str]]:
            rest = [sp["key"] for sp in (await http.get("/v1/spaces")).json()["spaces"]]
            mcp = [sp["key"] for sp in (await s.ok("listSpaces"))["spaces"]]
            return rest, mcp

        assert await visible() == (["alpha"], ["alpha"])
        assert "space 'beta' not found" in await s.error("search_memory", query="x", containerTag="beta")

        granted = " ".join(admin.ok("key", "grant", "cy-key", "beta=Read").stderr.split())
        assert "key 'cy-key' now holds alpha=ReadWrite, beta=Read (was alpha=ReadWrite)" in granted
        # The same session, its next request: the new space is there, at the access granted.
        assert await visible() == (["alpha", "beta"], ["alpha", "beta"])
        assert (await s.ok("search_memory", query="anything", containerTag="beta"))["space"] == "beta"
        assert "Read" in await s.error("add_memory", content="Beta holds this.", containerTag="beta")
        admin.ok("key", "grant", "cy-key", "beta=ReadWrite")
        assert (await s.ok("add_memory", content="Beta holds this.", containerTag="beta"))[
            "status"
        ] == "saved"
        again = admin.ok("key", "grant", "cy-key", "beta=ReadWrite").stderr
        assert "already holds alpha=ReadWrite, beta=ReadWrite; nothing changed" in again

        taken = " ".join(admin.ok("key", "ungrant", "cy-key", "beta").stderr.split())
        assert "key 'cy-key' now holds alpha=ReadWrite (was alpha=ReadWrite, beta=ReadWrite)" in taken
        assert await visible() == (["alpha"], ["alpha"])
        assert "space 'beta' not found" in await s.error("search_memory", query="x", containerTag="beta")
        assert (
            "holds no grant on 'beta'; nothing changed" in admin.ok("key", "ungrant", "cy-key", "beta").stderr
        )
        assert "would hold no grant; revoke it instead" in admin.refused("key", "ungrant", "cy-key", "alpha")

    # Each change is an audit event, as a manifest's grant changes are.
    changes = [e.details for e in reversed(await audit.list_events(db, "key.grants_changed"))]
    assert changes == [
        {"from": {"alpha": "ReadWrite"}, "to": {"alpha": "ReadWrite", "beta": "Read"}},
        {"from": {"alpha": "ReadWrite", "beta": "Read"}, "to": {"alpha": "ReadWrite", "beta": "ReadWrite"}},
        {"from": {"alpha": "ReadWrite", "beta": "ReadWrite"}, "to": {"alpha": "ReadWrite"}},
    ]
    # A key of a manifest has its grants in the manifest: the refusal names it.
    await declared_team(db)
    assert (
        "api key 'ada-laptop' is managed by apply/the operator; change spec.grants in its manifest "
        "(the ApiKey named 'ada-laptop') and apply it"
    ) in admin.refused("key", "grant", "ada-laptop", "alpha=Read")
    assert "managed by apply/the operator" in admin.refused("key", "ungrant", "ada-laptop", "team-a")
    assert {k["name"]: k["grants"] for k in admin.listing("key")}["ada-laptop"] == {"team-a": "ReadWrite"}


async def granted_spaces(db: Database, key: str) -> dict[str, str]:
    return {g.space.key: g.access.value for g in (await identity.authenticate(db, key)).grants}


async def test_a_new_space_reaches_the_bootstrap_key(admin: Admin, db: Database) -> None:
    bootstrap_key = await identity.bootstrap(db)
    assert bootstrap_key is not None
    # Without --grant-to: the exact line that grants it to the key `serve` printed.
    made = admin.ok("space", "create", "notes").stderr
    line = next(ln.strip() for ln in made.splitlines() if ln.strip().startswith("memory-mcp key grant"))
    assert line.startswith("memory-mcp key grant admin-bootstrap notes=ReadWrite --database-url ")
    assert "notes" not in await granted_spaces(db, bootstrap_key)
    done = cli(*shlex.split(line.replace(shlex.quote(masked(admin.url)), shlex.quote(admin.url)))[1:])
    assert done.returncode == 0, done.stderr
    assert (await granted_spaces(db, bootstrap_key))["notes"] == "ReadWrite"

    # With --grant-to: made and granted in one command; a key that is not there leaves no space.
    granted = admin.ok("space", "create", "journal", "--grant-to", "admin-bootstrap=Curate").stderr
    assert "granted it to key 'admin-bootstrap' (Curate)" in granted and "key grant" not in granted
    assert await granted_spaces(db, bootstrap_key) == {
        "default": "ReadWrite",
        "notes": "ReadWrite",
        "journal": "Curate",
    }
    assert "api key 'no-key' not found" in admin.refused("space", "create", "diary", "--grant-to", "no-key")
    assert await spaces.get_space(db, "diary") is None
