"""The CRDs are structural, complete and carry the CEL rules they promise."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from memory_mcp.store import validation
from tests.crds.crd_schema import Schema, load_crds, structural_problems, version_schema, walk

CRDS = load_crds()
KINDS = sorted(CRDS)


def rules_at(schema: Schema, path: str) -> list[str]:
    nodes = dict(walk(schema))
    return [v["rule"] for v in nodes[path].get("x-kubernetes-validations", [])]


def test_the_three_kinds_are_defined() -> None:
    assert KINDS == ["ApiKey", "Space", "User"]
    assert {crd["metadata"]["name"] for crd in CRDS.values()} == {
        "spaces.memory-mcp.io",
        "users.memory-mcp.io",
        "apikeys.memory-mcp.io",
    }


@pytest.mark.parametrize("kind", KINDS)
def test_crd_manifest_is_valid_kubernetes(kind: str) -> None:
    kubernetes_validate.validate(CRDS[kind], "1.33.0", strict=True)


@pytest.mark.parametrize("kind", KINDS)
def test_names_scope_and_version(kind: str) -> None:
    spec = CRDS[kind]["spec"]
    assert spec["group"] == "memory-mcp.io"
    assert spec["scope"] == "Cluster"
    names = spec["names"]
    assert CRDS[kind]["metadata"]["name"] == f"{names['plural']}.memory-mcp.io"
    assert names["categories"] == ["memory-mcp"]
    assert names["shortNames"] == [{"ApiKey": "mkey", "Space": "mspace", "User": "muser"}[kind]]
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize("kind", KINDS)
def test_schema_is_structural(kind: str) -> None:
    assert structural_problems(version_schema(CRDS[kind])) == []


def test_the_structural_check_catches_problems() -> None:
    broken: Schema = {
        "type": "object",
        "properties": {
            "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
            "spec": {
                "type": "object",
                "properties": {
                    "untyped": {"description": "no type"},
                    "both": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
                    "list": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "properties": {"name": {"type": "string"}}},
                    },
                    "enum": {"type": "string", "enum": ["A"], "default": "B"},
                },
            },
        },
    }
    problems = "\n".join(structural_problems(broken))
    for expected in (
        ".spec.untyped: no type",
        ".spec.both: properties and additionalProperties",
        ".spec.list: list-map key name must be required",
        ".spec.enum: invalid default",
        "metadata: only name and generateName",
    ):
        assert expected in problems


@pytest.mark.parametrize("kind", KINDS)
def test_status_follows_kubernetes_conventions(kind: str) -> None:
    status = version_schema(CRDS[kind])["properties"]["status"]["properties"]
    assert status["observedGeneration"]["type"] == "integer"
    conditions = status["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    assert set(item["required"]) == {"type", "status", "reason", "message", "lastTransitionTime"}
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert item["properties"]["lastTransitionTime"]["format"] == "date-time"
    assert item["properties"]["observedGeneration"]["type"] == "integer"


def test_condition_schemas_do_not_drift_apart() -> None:
    schemas = [
        version_schema(crd)["properties"]["status"]["properties"]["conditions"] for crd in CRDS.values()
    ]
    assert all(schema == schemas[0] for schema in schemas)


def test_apikey_status_fields() -> None:
    status = version_schema(CRDS["ApiKey"])["properties"]["status"]["properties"]
    assert {"keyPrefix", "secretName", "lastRotated", "rotationGeneration"} <= set(status)
    assert status["lastRotated"]["format"] == "date-time"


def test_space_status_counts() -> None:
    status = version_schema(CRDS["Space"])["properties"]["status"]["properties"]
    assert status["memoryCount"]["type"] == status["documentCount"]["type"] == "integer"


def _printer_paths(crd: dict[str, Any]) -> dict[str, str]:
    (version,) = crd["spec"]["versions"]
    return {column["name"]: column["jsonPath"] for column in version["additionalPrinterColumns"]}


@pytest.mark.parametrize("kind", KINDS)
def test_printer_columns_point_at_schema_fields(kind: str) -> None:
    columns = _printer_paths(CRDS[kind])
    assert columns["Ready"] == '.status.conditions[?(@.type=="Ready")].status'
    assert columns["Age"] == ".metadata.creationTimestamp"
    known = {path for path, _ in walk(version_schema(CRDS[kind]))}
    for name, json_path in columns.items():
        if json_path.startswith(".metadata."):
            continue
        schema_path = json_path.replace('[?(@.type=="Ready")]', "[]")
        assert schema_path in known, (name, json_path)


def test_default_space_column_shows_the_effective_default() -> None:
    # spec.defaultSpace may be omitted; the operator writes the space a request falls back to.
    assert _printer_paths(CRDS["ApiKey"])["Default Space"] == ".status.defaultSpace"
    status = version_schema(CRDS["ApiKey"])["properties"]["status"]["properties"]
    assert status["defaultSpace"]["maxLength"] == 63


def test_space_rules() -> None:
    schema = version_schema(CRDS["Space"])
    spec = schema["properties"]["spec"]
    assert spec["required"] == ["displayName"]
    assert spec["properties"]["deletionPolicy"]["enum"] == ["Retain", "Delete"]
    assert spec["properties"]["deletionPolicy"]["default"] == "Retain"
    assert spec["properties"]["writePolicy"]["enum"] == ["Direct", "Review"]
    assert spec["properties"]["writePolicy"]["default"] == "Direct"
    assert rules_at(schema, ".spec.writePolicy") == [], "the enum says it"
    for quota in ("maxMemories", "maxDocuments", "maxBytes"):
        assert spec["properties"]["quotas"]["properties"][quota]["minimum"] == 0
    for quota in ("maxMemories", "maxDocuments"):  # their columns are PostgreSQL integers
        assert spec["properties"]["quotas"]["properties"][quota]["maximum"] == validation.MAX_INTEGER_COLUMN
    for limit in ("maxPdfPages", "maxMediaSeconds"):  # NULL, not 0, says "the server's setting"
        assert spec["properties"]["quotas"]["properties"][limit]["minimum"] == 1
        assert spec["properties"]["quotas"]["properties"][limit]["maximum"] == validation.MAX_SPACE_FILE_LIMIT
    name = schema["properties"]["metadata"]["properties"]["name"]
    assert name["maxLength"] == 63
    assert rules_at(schema, ".spec.quotas") == [
        "has(self.maxMemories) || has(self.maxDocuments) || has(self.maxBytes) || "
        "has(self.maxPdfPages) || has(self.maxMediaSeconds)"
    ]
    assert rules_at(schema, ".spec.displayName") == ["self.trim().size() > 0"]


def test_user_rules() -> None:
    spec = version_schema(CRDS["User"])["properties"]["spec"]
    assert set(spec["required"]) == {"email", "displayName"}
    assert spec["properties"]["role"]["enum"] == ["Writer", "Reader"]
    assert spec["properties"]["active"]["default"] is True
    assert spec["properties"]["email"]["pattern"]


def test_apikey_rules() -> None:
    schema = version_schema(CRDS["ApiKey"])
    spec = schema["properties"]["spec"]
    assert set(spec["required"]) == {"user", "grants", "secretRef"}
    assert rules_at(schema, ".spec.user") == ["self == oldSelf"]
    assert rules_at(schema, ".spec.secretRef") == ["self == oldSelf"]
    assert rules_at(schema, ".spec") == [
        "!has(self.defaultSpace) || self.grants.exists(g, g.space == self.defaultSpace)",
        "(has(self.rotationGeneration) ? self.rotationGeneration : 0) >= "
        "(has(oldSelf.rotationGeneration) ? oldSelf.rotationGeneration : 0)",
    ]
    assert rules_at(schema, ".spec.rotationGeneration") == []
    assert rules_at(schema, ".spec.rateLimit") == [], "burst's minimum says it"
    grants = spec["properties"]["grants"]
    assert grants["minItems"] == 1
    assert grants["x-kubernetes-list-type"] == "map"
    assert grants["x-kubernetes-list-map-keys"] == ["space"]
    assert grants["items"]["properties"]["access"]["enum"] == ["Read", "ReadWrite", "Curate"]
    rate = spec["properties"]["rateLimit"]
    assert rate["required"] == ["requestsPerMinute"]
    assert rate["properties"]["requestsPerMinute"]["minimum"] == rate["properties"]["burst"]["minimum"] == 1
    assert set(spec["properties"]["secretRef"]["required"]) == {"namespace", "name"}
    assert spec["properties"]["expiresAt"]["format"] == "date-time"
    assert spec["properties"]["rotationGeneration"]["type"] == "integer"


@pytest.mark.parametrize("kind", KINDS)
def test_every_cel_rule_has_a_message(kind: str) -> None:
    for path, node in walk(version_schema(CRDS[kind])):
        for rule in node.get("x-kubernetes-validations", []):
            assert rule.get("message"), (path, rule["rule"])


@pytest.mark.parametrize("kind", KINDS)
def test_cel_rules_have_bounded_inputs(kind: str) -> None:
    # The API server rejects rules whose estimated cost is too high: strings and lists in the spec,
    # which the rules read, need maxLength / maxItems.
    for path, node in walk(version_schema(CRDS[kind])["properties"]["spec"], ".spec"):
        if node.get("type") == "string" and "enum" not in node and "format" not in node:
            assert "maxLength" in node, path
        if node.get("type") == "array":
            assert "maxItems" in node, path
