"""Every CEL rule of crds/ evaluated on objects it must admit and objects it must refuse.

An API server older than 1.25 drops ``x-kubernetes-validations``; these cases show what a newer one
does with each rule, transition rules included (an update, with the old object).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.crds.cel_rules import KUBERNETES_FUNCTIONS, evaluate, results, rules, violations
from tests.crds.crd_schema import load_crds, validation_errors, version_schema

CRDS = load_crds()
SCHEMAS = {kind: version_schema(crd) for kind, crd in CRDS.items()}

SPACE = {"displayName": "Team Alpha", "writePolicy": "Review", "quotas": {"maxMemories": 1000}}
USER = {"email": "ada@example.com", "displayName": "Ada Lovelace", "role": "Writer"}
KEY = {
    "user": "ada",
    "grants": [{"space": "alpha", "access": "ReadWrite"}, {"space": "handbook", "access": "Read"}],
    "defaultSpace": "alpha",
    "secretRef": {"namespace": "agents", "name": "ada-key"},
    "rotationGeneration": 2,
    "rateLimit": {"requestsPerMinute": 60, "burst": 10},
}


def obj(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "memory-mcp.io/v1alpha1", "kind": kind, "metadata": {"name": "x"}, "spec": spec}


def without(spec: dict[str, Any], field: str) -> dict[str, Any]:
    return {name: value for name, value in spec.items() if name != field}


# (kind, old spec or None for a create, new spec, messages of the rules it breaks)
CASES: dict[str, tuple[str, dict[str, Any] | None, dict[str, Any], list[str]]] = {
    "space": ("Space", None, SPACE, []),
    "space blank name": ("Space", None, {**SPACE, "displayName": " \t "}, ["displayName must not be blank"]),
    "space name with spaces around": ("Space", None, {**SPACE, "displayName": " A "}, []),
    "space empty quotas": (
        "Space",
        None,
        {**SPACE, "quotas": {}},
        ["quotas must set at least one of maxMemories, maxDocuments, maxBytes, maxPdfPages, maxMediaSeconds"],
    ),
    "space zero byte quota": ("Space", None, {**SPACE, "quotas": {"maxBytes": 0}}, []),
    "space only a page limit": ("Space", None, {**SPACE, "quotas": {"maxPdfPages": 5000}}, []),
    "space only a media limit": ("Space", None, {**SPACE, "quotas": {"maxMediaSeconds": 600}}, []),
    "space without quotas": ("Space", None, without(SPACE, "quotas"), []),
    "user": ("User", None, USER, []),
    "user blank name": ("User", None, {**USER, "displayName": "  "}, ["displayName must not be blank"]),
    "key": ("ApiKey", None, KEY, []),
    "key without default": ("ApiKey", None, without(KEY, "defaultSpace"), []),
    "key default not granted": (
        "ApiKey",
        None,
        {**KEY, "defaultSpace": "ops"},
        ["defaultSpace must be one of the granted spaces"],
    ),
    "key unchanged": ("ApiKey", KEY, KEY, []),
    "key other grants": ("ApiKey", KEY, {**KEY, "grants": KEY["grants"][:1]}, []),
    "key other user": (
        "ApiKey",
        KEY,
        {**KEY, "user": "grace"},
        ["user is immutable; create a new ApiKey for another user"],
    ),
    "key secret moved": (
        "ApiKey",
        KEY,
        {**KEY, "secretRef": {"namespace": "ci", "name": "ada-key"}},
        ["secretRef is immutable; create a new ApiKey to move the key"],
    ),
    "key rotated": ("ApiKey", KEY, {**KEY, "rotationGeneration": 3}, []),
    "key rotation lowered": ("ApiKey", KEY, {**KEY, "rotationGeneration": 1}, ["ROTATION"]),
    "key rotation removed": ("ApiKey", KEY, without(KEY, "rotationGeneration"), ["ROTATION"]),
    "key rotation added": (
        "ApiKey",
        without(KEY, "rotationGeneration"),
        {**KEY, "rotationGeneration": 1},
        [],
    ),
    "key rotation zero removed": (
        "ApiKey",
        {**KEY, "rotationGeneration": 0},
        without(KEY, "rotationGeneration"),
        [],
    ),
    "key rotation zero added": (
        "ApiKey",
        without(KEY, "rotationGeneration"),
        {**KEY, "rotationGeneration": 0},
        [],
    ),
    "key two changes": (
        "ApiKey",
        KEY,
        {**KEY, "user": "grace", "defaultSpace": "ops"},
        [
            "defaultSpace must be one of the granted spaces",
            "user is immutable; create a new ApiKey for another user",
        ],
    ),
}


def rotation_message() -> str:
    (rule,) = [r for r in rules(SCHEMAS["ApiKey"]) if "rotationGeneration" in r.rule]
    return rule.message


@pytest.mark.parametrize("case", list(CASES))
def test_rules_admit_and_refuse(case: str) -> None:
    kind, old, new, expected = CASES[case]
    expected = [rotation_message() if message == "ROTATION" else message for message in expected]
    old_object = None if old is None else obj(kind, old)
    # Each case is a valid object as far as the OpenAPI schema goes: only the rules decide.
    assert validation_errors(CRDS[kind], obj(kind, new)) == []
    assert sorted(violations(SCHEMAS[kind], obj(kind, new), old_object)) == sorted(expected)


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_every_rule_is_seen_holding_and_failing(kind: str) -> None:
    seen: dict[str, set[bool]] = {}
    for case_kind, old, new, _ in CASES.values():
        if case_kind == kind:
            for rule, held in results(
                SCHEMAS[kind], obj(kind, new), None if old is None else obj(kind, old)
            ).items():
                seen.setdefault(f"{rule.path}: {rule.rule}", set()).add(held)
    assert {f"{rule.path}: {rule.rule}" for rule in rules(SCHEMAS[kind])} == set(seen)
    assert {name: outcomes for name, outcomes in seen.items() if outcomes != {True, False}} == {}


def test_transition_rules_do_not_run_on_create() -> None:
    transitions = [rule for kind in CRDS for rule in rules(SCHEMAS[kind]) if rule.transition]
    assert {rule.path for rule in transitions} == {".spec", ".spec.user", ".spec.secretRef"}
    created = results(SCHEMAS["ApiKey"], obj("ApiKey", KEY))
    assert not [rule for rule in created if rule.transition]
    updated = results(SCHEMAS["ApiKey"], obj("ApiKey", KEY), obj("ApiKey", KEY))
    assert set(transitions) <= set(updated)


def test_the_evaluator_refuses_what_it_cannot_evaluate() -> None:
    assert not evaluate("self.noSuchFunction() == 1", "text")
    assert not evaluate("self.missing > 0", {})
    assert evaluate("self.trim() == 'a'", " a\n")
    assert set(KUBERNETES_FUNCTIONS) == {"trim"}


@pytest.mark.parametrize("field", ["maxPdfPages", "maxMediaSeconds"])
@pytest.mark.parametrize("value", [0, -1, 1.5, 2**31])
def test_the_schema_refuses_a_file_limit_that_is_not_a_whole_number_from_one(
    field: str, value: object
) -> None:
    def errors(limit: object) -> list[str]:
        return validation_errors(CRDS["Space"], obj("Space", {**SPACE, "quotas": {field: limit}}))

    assert errors(1) == [] and errors(2**31 - 1) == []
    refused = errors(value)
    assert len(refused) == 1 and field in refused[0], refused


def test_what_the_removed_rules_said_the_schema_still_refuses() -> None:
    space = validation_errors(CRDS["Space"], obj("Space", {**SPACE, "writePolicy": "Queue"}))
    assert len(space) == 1 and "writePolicy" in space[0]
    key = validation_errors(
        CRDS["ApiKey"], obj("ApiKey", {**KEY, "rateLimit": {"requestsPerMinute": 5, "burst": 0}})
    )
    assert len(key) == 1 and "burst" in key[0]
