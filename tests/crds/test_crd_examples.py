"""Example objects against the CRD schemas: what platform teams write passes, mistakes fail."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.crds.crd_schema import load_crds, validation_errors

CRDS = load_crds()
API_VERSION = "memory-mcp.io/v1alpha1"

SPACE: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "Space",
    "metadata": {"name": "team-alpha", "labels": {"team": "alpha"}},
    "spec": {
        "displayName": "Team Alpha",
        "description": "Decisions and conventions of team Alpha.",
        "deletionPolicy": "Retain",
        "quotas": {"maxMemories": 100000, "maxDocuments": 0},
    },
}
USER: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "User",
    "metadata": {"name": "ada"},
    "spec": {"email": "ada@example.com", "displayName": "Ada Lovelace", "role": "Writer", "active": True},
}
API_KEY: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "ApiKey",
    "metadata": {"name": "ada-laptop"},
    "spec": {
        "user": "ada",
        "grants": [{"space": "team-alpha", "access": "ReadWrite"}, {"space": "handbook", "access": "Read"}],
        "defaultSpace": "team-alpha",
        "secretRef": {"namespace": "agents", "name": "ada-memory-key"},
        "expiresAt": "2027-01-31T00:00:00Z",
        "rotationGeneration": 2,
    },
    "status": {
        "observedGeneration": 3,
        "keyPrefix": "mk_3f9a",
        "secretName": "ada-memory-key",
        "lastRotated": "2026-11-30T10:00:00Z",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KeyIssued",
                "message": "The key is stored in agents/ada-memory-key.",
                "lastTransitionTime": "2026-11-30T10:00:00Z",
                "observedGeneration": 3,
            }
        ],
    },
}
EXAMPLES = {"Space": SPACE, "User": USER, "ApiKey": API_KEY}


def changed(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``obj`` with the dotted ``path`` set to ``value`` (``...`` deletes it)."""
    result = copy.deepcopy(obj)
    *parents, last = path.split(".")
    node: Any = result
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is ...:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return result


def errors(obj: dict[str, Any]) -> list[str]:
    return validation_errors(CRDS[obj["kind"]], obj)


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_full_examples_pass(kind: str) -> None:
    assert errors(EXAMPLES[kind]) == []


@pytest.mark.parametrize(
    "obj",
    [
        changed(SPACE, "spec", {"displayName": "Minimal"}),
        changed(USER, "spec", {"email": "bob@corp.example.org", "displayName": "Bob"}),
        changed(changed(API_KEY, "spec.defaultSpace", ...), "status", ...),
        changed(API_KEY, "spec.grants", [{"space": "handbook", "access": "Read"}]),
    ],
    ids=["space", "user", "apikey-no-default", "apikey-one-grant"],
)
def test_minimal_examples_pass(obj: dict[str, Any]) -> None:
    assert errors(obj) == []


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (changed(USER, "spec.role", "Admin"), "'Admin' is not one of"),
        (changed(USER, "spec.email", "ada.example.com"), "does not match"),
        (changed(USER, "spec.email", "ada@localhost"), "does not match"),
        (changed(USER, "spec.email", ...), "'email' is a required property"),
        (changed(USER, "spec.active", "yes"), "is not of type 'boolean'"),
        (changed(API_KEY, "spec.grants", []), "should be non-empty"),
        (changed(API_KEY, "spec.grants", ...), "'grants' is a required property"),
        (changed(API_KEY, "spec.grants.0.access", "Write"), "'Write' is not one of"),
        (changed(API_KEY, "spec.grants.0.access", ...), "'access' is a required property"),
        (
            changed(API_KEY, "spec.grants.1.space", "team-alpha"),
            "duplicate entry for {'space': 'team-alpha'}",
        ),
        (changed(API_KEY, "spec.grants.0.space", "Team_Alpha"), "does not match"),
        (changed(API_KEY, "spec.user", ...), "'user' is a required property"),
        (changed(API_KEY, "spec.secretRef.namespace", ...), "'namespace' is a required property"),
        (changed(API_KEY, "spec.expiresAt", "next tuesday"), "is not a 'date-time'"),
        (changed(API_KEY, "spec.rotationGeneration", -1), "less than the minimum"),
        (changed(API_KEY, "status.conditions.0.status", "Yes"), "'Yes' is not one of"),
        (changed(API_KEY, "spec.scopes", ["all"]), "Additional properties are not allowed"),
        (changed(SPACE, "metadata.name", "Team_Alpha"), "does not match"),
        (changed(SPACE, "metadata.name", "a" * 64), "is too long"),
        (changed(SPACE, "spec.deletionPolicy", "Purge"), "'Purge' is not one of"),
        (changed(SPACE, "spec.quotas.maxMemories", -5), "less than the minimum"),
        (changed(SPACE, "spec.displayName", ...), "'displayName' is a required property"),
        (changed(SPACE, "apiVersion", "memory-mcp.io/v1"), "apiVersion: expected memory-mcp.io/v1alpha1"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_invalid_examples_fail(obj: dict[str, Any], expected: str) -> None:
    found = errors(obj)
    assert any(expected in error for error in found), found
