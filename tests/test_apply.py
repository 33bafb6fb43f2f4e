"""`memory-mcp apply`: manifests checked like the CRDs check them, applied once, re-applied as no-ops."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from sqlalchemy import text

from memory_mcp.apply import ManifestError, apply_manifests, keys_file_content, load_manifests
from memory_mcp.operator.specs import ApiKeySpec, SpaceSpec, UserSpec
from memory_mcp.store import identity, spaces, users
from memory_mcp.store.db import Database
from memory_mcp.store.embedded import EmbeddedPostgres
from memory_mcp.store.errors import AuthenticationFailed
from tests.crds.crd_schema import load_crds, validation_errors
from tests.server.conftest import run_server

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "docs" / "examples").glob("*.yaml"))
API_VERSION = "memory-mcp.io/v1alpha1"


def obj(kind: str, name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}


def team(*, access: str = "ReadWrite", active: bool = True, rotation: int = 0) -> str:
    """A small team file; ApiKeys first, to show that the order in the file does not matter."""
    return yaml.safe_dump_all(
        [
            obj(
                "ApiKey",
                "ada-laptop",
                user="ada",
                grants=[{"space": "alpha", "access": access}, {"space": "handbook", "access": "Read"}],
                defaultSpace="alpha",
                secretRef={"namespace": "agents", "name": "ada-key"},
                rotationGeneration=rotation,
            ),
            obj(
                "User",
                "ada",
                email="ada@example.com",
                displayName="Ada Lovelace",
                role="Writer",
                active=active,
            ),
            obj("Space", "alpha", displayName="Alpha"),
            obj("Space", "handbook", displayName="Handbook", deletionPolicy="Retain"),
        ]
    )


async def apply_text(db: Database, text: str) -> Any:
    return await apply_manifests(db, load_manifests(text, "team.yaml"))


async def grants_of(db: Database, key: str) -> dict[str, str]:
    caller = await identity.authenticate(db, key)
    return {g.space.key: g.access.value for g in caller.grants}


async def test_apply_creates_everything_and_reapplying_changes_nothing(db: Database) -> None:
    first = await apply_text(db, team())
    assert first.ok
    assert [r.describe() for r in first.results] == [
        "space/alpha: created space 'alpha'",
        "space/handbook: created space 'handbook'",
        "user/ada: created user 'ada' (Writer)",
        "apikey/ada-laptop: issued a new key for user 'ada'",
    ]
    (key,) = first.new_keys.values()
    assert list(first.new_keys) == ["ada-laptop"]
    assert await grants_of(db, key) == {"alpha": "ReadWrite", "handbook": "Read"}

    again = await apply_text(db, team())
    assert again.ok and again.new_keys == {}
    assert {r.describe().split(": ", 1)[1] for r in again.results} == {"unchanged"}
    assert await grants_of(db, key) == {"alpha": "ReadWrite", "handbook": "Read"}


async def test_a_changed_grant_applies_to_the_same_key(db: Database) -> None:
    key = (await apply_text(db, team())).new_keys["ada-laptop"]
    changed = await apply_text(db, team(access="Read"))
    assert changed.new_keys == {}
    assert changed.results[-1].describe() == (
        "apikey/ada-laptop: set grants to alpha=Read, handbook=Read (were alpha=ReadWrite, handbook=Read)"
    )
    assert await grants_of(db, key) == {"alpha": "Read", "handbook": "Read"}


async def test_every_change_is_named_with_its_old_and_new_value(db: Database) -> None:
    await apply_text(db, team())
    changed = yaml.safe_load_all(team())
    edited = []
    for doc in changed:
        if doc["kind"] == "Space" and doc["metadata"]["name"] == "alpha":
            doc["spec"].update(displayName="Alpha team", deletionPolicy="Delete", quotas={"maxMemories": 100})
        if doc["kind"] == "User":
            doc["spec"].update(displayName="Ada King", email="ada@king.example")
        if doc["kind"] == "ApiKey":
            doc["spec"].update(defaultSpace="handbook", expiresAt="2031-01-01T00:00:00Z")
        edited.append(doc)
    report = await apply_text(db, yaml.safe_dump_all(edited))
    assert [r.describe() for r in report.results] == [
        "space/alpha: updated space 'alpha': displayName 'Alpha' -> 'Alpha team', "
        "deletionPolicy 'Retain' -> 'Delete', quotas.maxMemories none -> 100",
        "space/handbook: unchanged",
        "user/ada: changed the email of 'ada' from ada@example.com to ada@king.example; "
        "changed the display name of 'ada' from 'Ada Lovelace' to 'Ada King'",
        "apikey/ada-laptop: set defaultSpace 'alpha' -> 'handbook', "
        "expiresAt none -> '2031-01-01T00:00:00+00:00'",
    ]


async def file_limits(db: Database, key: str) -> tuple[int | None, int | None]:
    async with db.transaction() as conn:
        row = (
            await conn.execute(
                text("SELECT max_pdf_pages, max_media_seconds FROM spaces WHERE key = :k"), {"k": key}
            )
        ).one()
    return row.max_pdf_pages, row.max_media_seconds


async def test_a_spaces_own_file_limits_are_stored_and_their_changes_named(db: Database) -> None:
    manuals = obj(
        "Space", "manuals", displayName="Manuals", quotas={"maxPdfPages": 5000, "maxMediaSeconds": 600}
    )
    created = await apply_text(db, yaml.safe_dump(manuals))
    assert created.ok and await file_limits(db, "manuals") == (5000, 600)
    manuals["spec"]["quotas"] = {"maxPdfPages": 20}
    changed = await apply_text(db, yaml.safe_dump(manuals))
    assert [r.describe() for r in changed.results] == [
        "space/manuals: updated space 'manuals': quotas.maxPdfPages 5000 -> 20, quotas.maxMediaSeconds 600 -> none"
    ]
    assert await file_limits(db, "manuals") == (20, None)  # None: the server's setting applies
    assert not (await apply_text(db, yaml.safe_dump(manuals))).results[0].outcome.changed


def test_a_file_limit_must_be_a_whole_number_from_one() -> None:
    bad = obj("Space", "manuals", displayName="Manuals", quotas={"maxPdfPages": 0, "maxMediaSeconds": 1.5})
    with pytest.raises(ManifestError) as caught:
        load_manifests(yaml.safe_dump(bad), "team.yaml")
    where = "Space 'manuals' (team.yaml, document 1)"
    assert caught.value.problems == [
        f"{where}: spec.quotas.maxPdfPages: must be an integer from 1 to 2147483647, got 0",
        f"{where}: spec.quotas.maxMediaSeconds: must be an integer from 1 to 2147483647, got 1.5",
    ]
    for value in (True, 2**31, "600"):
        with pytest.raises(ManifestError, match=r"spec\.quotas\.maxMediaSeconds: must be an integer"):
            load_manifests(
                yaml.safe_dump(obj("Space", "m", displayName="M", quotas={"maxMediaSeconds": value})),
                "t.yaml",
            )


async def test_a_deactivated_user_is_locked_out_of_the_real_server(
    db: Database, db_urls: tuple[str, str]
) -> None:
    key = (await apply_text(db, team())).new_keys["ada-laptop"]
    async with run_server(db_urls[0], None) as server, httpx2.AsyncClient(base_url=server.base) as http:
        headers = {"Authorization": f"Bearer {key}"}
        whoami = await http.get("/v1/whoami", headers=headers)
        assert whoami.status_code == 200
        assert whoami.json()["user"]["email"] == "ada@example.com"
        report = await apply_text(db, team(active=False))
        assert (
            report.results[2].describe()
            == "user/ada: deactivated user 'ada': none of their keys work any more"
        )
        assert (await http.get("/v1/whoami", headers=headers)).status_code == 401
    with pytest.raises(AuthenticationFailed):
        await identity.authenticate(db, key)
    back = await apply_text(db, team(active=True))
    assert back.new_keys == {}
    assert await grants_of(db, key) == {"alpha": "ReadWrite", "handbook": "Read"}


async def test_raising_the_rotation_generation_issues_one_new_key(db: Database) -> None:
    old = (await apply_text(db, team())).new_keys["ada-laptop"]
    new = (await apply_text(db, team(rotation=1))).new_keys["ada-laptop"]
    assert new != old
    with pytest.raises(AuthenticationFailed):
        await identity.authenticate(db, old)
    assert await grants_of(db, new) == {"alpha": "ReadWrite", "handbook": "Read"}
    assert (await apply_text(db, team(rotation=1))).new_keys == {}


async def test_a_key_on_an_undeclared_space_is_reported_and_the_rest_applies(db: Database) -> None:
    text = yaml.safe_dump_all(
        [
            obj("User", "ada", email="ada@example.com", displayName="Ada"),
            obj(
                "ApiKey",
                "k",
                user="ada",
                grants=[{"space": "nowhere", "access": "Read"}],
                secretRef={"namespace": "a", "name": "b"},
            ),
        ]
    )
    report = await apply_text(db, text)
    assert not report.ok and report.new_keys == {}
    assert report.results[1].describe() == (
        "apikey/k: not applied (SpaceNotFound): Granted space 'nowhere' does not exist; "
        "declare it as a Space and this key follows."
    )
    assert await users.get_user(db, "ada") is not None


def test_every_invalid_object_is_named_with_its_field() -> None:
    text = yaml.safe_dump_all(
        [
            obj("Space", "alpha", displayName="Alpha", deletionPolicy="Keep"),
            {**obj("User", "ada", email="not-an-email", displayName="Ada")},
            obj("ApiKey", "k", user="ada", grants=[{"space": "alpha", "access": "Write"}], secretRef={}),
            obj(
                "ApiKey",
                "d",
                user="ada",
                grants=[{"space": "alpha", "access": "Read"}],
                defaultSpace="beta",
                secretRef={"namespace": "a", "name": "b"},
            ),
            {**obj("Space", "alpha", displayName="Again")},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
            {**obj("Space", "beta", displayName="B"), "apiVersion": "memory-mcp.io/v1"},
            {"apiVersion": API_VERSION, "kind": "User", "spec": {}},
        ]
    )
    with pytest.raises(ManifestError) as caught:
        load_manifests(text, "team.yaml")
    assert caught.value.problems == [
        "Space 'alpha' (team.yaml, document 1): spec.deletionPolicy: must be 'Retain' or 'Delete', got 'Keep'",
        "User 'ada' (team.yaml, document 2): spec.email: must be an email address, got 'not-an-email'",
        "ApiKey 'k' (team.yaml, document 3): spec.grants[0].access: must be 'Read', 'ReadWrite' or 'Curate', got 'Write'",
        "ApiKey 'k' (team.yaml, document 3): spec.secretRef.namespace: must be 1-63 lowercase letters, digits "
        "or '-', starting and ending with a letter or digit",
        "ApiKey 'k' (team.yaml, document 3): spec.secretRef.name: must be a DNS subdomain name of at most 253 "
        "characters",
        "ApiKey 'd' (team.yaml, document 4): spec.defaultSpace: 'beta' must be one of the granted spaces",
        "Space 'alpha' (team.yaml, document 5): declared twice (first in team.yaml, document 1)",
        "team.yaml, document 6: kind must be one of Space, User, ApiKey, got 'ConfigMap'",
        "Space 'beta' (team.yaml, document 7): apiVersion: must be memory-mcp.io/v1alpha1, got 'memory-mcp.io/v1'",
        "User (team.yaml, document 8): metadata.name: is required",
        "User (team.yaml, document 8): spec.email: is required",
        "User (team.yaml, document 8): spec.displayName: is required",
    ]


def test_unknown_fields_are_refused_at_every_level_with_every_other_problem() -> None:
    space = {
        **obj(
            "Space",
            "gamma",
            displayName=" ",
            colour="blue",
            quotas={"maxMemories": -1, "maxDocuments": 2**31, "maxMemory": 3},
        ),
        "extra": 1,
    }
    key = obj(
        "ApiKey",
        "k",
        user="ada",
        grants=[{"space": "gamma", "access": "Read", "role": "x"}],
        secretRef={"namespace": "ns", "name": "s", "key": "k"},
    )
    with pytest.raises(ManifestError) as caught:
        load_manifests(yaml.safe_dump_all([space, key]), "team.yaml")
    prune = "a cluster would drop it silently, since CRDs prune unknown fields"
    assert caught.value.problems == [
        f"Space 'gamma' (team.yaml, document 1): extra: unknown field (an object has apiVersion, kind, "
        f"metadata, spec, status); {prune}",
        f"Space 'gamma' (team.yaml, document 1): spec.colour: unknown field (spec has deletionPolicy, "
        f"description, displayName, quotas, webhooks, writePolicy); {prune}",
        "Space 'gamma' (team.yaml, document 1): spec.displayName: must not be blank",
        f"Space 'gamma' (team.yaml, document 1): spec.quotas.maxMemory: unknown field (spec.quotas has "
        f"maxBytes, maxDocuments, maxMediaSeconds, maxMemories, maxPdfPages); {prune}",
        "Space 'gamma' (team.yaml, document 1): spec.quotas.maxMemories: must be an integer from 0 to 2147483647, "
        "got -1",
        # More than the database's integer column holds: refused here, not by a failing reconcile.
        "Space 'gamma' (team.yaml, document 1): spec.quotas.maxDocuments: must be an integer from 0 to 2147483647, "
        "got 2147483648",
        f"ApiKey 'k' (team.yaml, document 2): spec.grants[0].role: unknown field (spec.grants[0] has access, "
        f"space); {prune}",
        f"ApiKey 'k' (team.yaml, document 2): spec.secretRef.key: unknown field (spec.secretRef has name, "
        f"namespace); {prune}",
    ]


def test_the_parsers_know_exactly_the_fields_the_crds_declare() -> None:
    crds = load_crds()

    def properties(kind: str, *path: str) -> set[str]:
        schema = crds[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        for step in path:
            schema = schema["properties"][step]
            schema = schema.get("items", schema)
        return set(schema["properties"])

    assert properties("Space") == set(SpaceSpec.FIELDS)
    assert properties("Space", "quotas") == set(SpaceSpec.QUOTA_FIELDS)
    assert properties("User") == set(UserSpec.FIELDS)
    assert properties("ApiKey") == set(ApiKeySpec.FIELDS)
    assert properties("ApiKey", "grants") == set(ApiKeySpec.GRANT_FIELDS)
    assert properties("ApiKey", "secretRef") == set(ApiKeySpec.SECRET_REF_FIELDS)


def test_broken_yaml_and_empty_files_are_refused() -> None:
    with pytest.raises(ManifestError, match=r"team\.yaml: not valid YAML"):
        load_manifests("kind: [Space", "team.yaml")
    with pytest.raises(ManifestError, match="no Space, User or ApiKey objects found"):
        load_manifests("---\n", "team.yaml")


def test_a_kubernetes_list_is_unpacked() -> None:
    text = yaml.safe_dump(
        {"apiVersion": "v1", "kind": "List", "items": [obj("Space", "alpha", displayName="A")]}
    )
    assert [str(m) for m in load_manifests(text)] == ["space/alpha"]


def test_keys_file_keeps_earlier_keys(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    assert json.loads(keys_file_content(path, {"a": "mmk_1"})) == {"a": "mmk_1"}
    path.write_text(json.dumps({"a": "mmk_1", "b": "mmk_2"}))
    assert json.loads(keys_file_content(path, {"b": "mmk_3"})) == {"a": "mmk_1", "b": "mmk_3"}
    path.write_text("[1, 2]")
    with pytest.raises(ManifestError, match="not a JSON object of keys"):
        keys_file_content(path, {})


# --- the examples in docs/examples -------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_objects_pass_the_crd_schemas(path: Path) -> None:
    crds = load_crds()
    objects = [o for o in yaml.safe_load_all(path.read_text()) if o]
    assert objects
    for manifest in objects:
        assert validation_errors(crds[manifest["kind"]], manifest) == [], manifest["metadata"]["name"]
    assert len(load_manifests(path.read_text(), path.name)) == len(objects)


async def test_the_examples_apply_cleanly_and_reapply_as_no_ops(db: Database) -> None:
    assert {p.name for p in EXAMPLES} >= {"spaces.yaml", "users.yaml", "apikeys.yaml", "laptop.yaml"}
    manifests = [m for path in EXAMPLES for m in load_manifests(path.read_text(), path.name)]
    report = await apply_manifests(db, manifests)
    assert report.ok, [r.describe() for r in report.results if not r.outcome.ready]
    assert sorted(report.new_keys) == [
        "ada-laptop",
        "ci-bot-docs",
        "grace-agent",
        "margaret-curator",
        "me-claude",
        "policy-agent",
    ]
    assert await grants_of(db, report.new_keys["margaret-curator"]) == {"policies": "Curate"}
    policies = await spaces.get_space(db, "policies")
    assert policies is not None and policies.write_policy == "Review"
    async with db.transaction() as conn:
        max_bytes = await conn.scalar(text("SELECT max_bytes FROM spaces WHERE key = 'policies'"))
    assert max_bytes == 50_000_000
    agent = (await identity.authenticate(db, report.new_keys["policy-agent"])).key
    assert (agent.rate_per_minute, agent.rate_burst) == (120, 20)
    assert await grants_of(db, report.new_keys["grace-agent"]) == {
        "team-alpha": "ReadWrite",
        "handbook": "Read",
    }
    again = await apply_manifests(db, manifests)
    assert again.ok and again.new_keys == {} and not any(r.outcome.changed for r in again.results)


# --- the command, next to another process on the same data dir ---------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memory_mcp.cli", "apply", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "MEMORY_MCP_LOG_FORMAT": "text"},
    )


async def test_cli_applies_beside_a_running_server_on_the_same_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    # What `memory-mcp serve` holds while it runs: the embedded PostgreSQL under the data dir.
    held = EmbeddedPostgres(data_dir)
    held.start()
    try:
        manifest = tmp_path / "team.yaml"
        manifest.write_text(team())
        keys_out = tmp_path / "keys.json"
        first = run_cli("-f", str(manifest), "--data-dir", str(data_dir), "--keys-out", str(keys_out))
        assert first.returncode == 0, first.stderr
        assert "apikey/ada-laptop: issued a new key for user 'ada'" in first.stderr
        assert first.stdout == ""  # the key went to the file, not the terminal
        assert stat.S_IMODE(keys_out.stat().st_mode) == 0o600
        keys = json.loads(keys_out.read_text())
        assert list(keys) == ["ada-laptop"]

        second = run_cli("-f", str(manifest), "--data-dir", str(data_dir))
        assert second.returncode == 0, second.stderr
        assert second.stdout == ""
        assert "apikey/ada-laptop: unchanged" in second.stderr

        manifest.write_text(team(rotation=1))
        third = run_cli("-f", str(manifest), "--data-dir", str(data_dir))
        assert third.returncode == 0, third.stderr
        (line,) = third.stdout.splitlines()
        name, new_key = line.split(": ")
        assert name == "ada-laptop" and new_key.startswith("mmk_") and new_key != keys["ada-laptop"]

        invalid = tmp_path / "bad.yaml"
        invalid.write_text(yaml.safe_dump(obj("Space", "Bad_Name", displayName="x")))
        refused = run_cli("-f", str(invalid), "--data-dir", str(data_dir))
        assert refused.returncode == 1
        assert "metadata.name: must be 1-63 lowercase letters" in refused.stderr

        # The server's PostgreSQL outlived every apply and sees what they did.
        db = Database(held.app_url, pool_size=1)
        try:
            assert await grants_of(db, new_key) == {"alpha": "ReadWrite", "handbook": "Read"}
        finally:
            await db.close()
    finally:
        held.stop()
