"""A Space's spec.webhooks and status.webhooks: the CRD schema and the operator's parser agree."""

from __future__ import annotations

from typing import Any

import pytest

from memory_mcp.operator.specs import SpaceSpec
from memory_mcp.store import webhooks
from memory_mcp.store.errors import ValidationError
from tests.crds.crd_schema import load_crds, validation_errors, version_schema
from tests.crds.test_crd_examples import changed

CRDS = load_crds()
REF = {"namespace": "hooks", "name": "notes-webhook", "key": "signing"}
SPACE: dict[str, Any] = {
    "apiVersion": "memory-mcp.io/v1alpha1",
    "kind": "Space",
    "metadata": {"name": "notes"},
    "spec": {
        "displayName": "Notes",
        "webhooks": [
            {"url": "https://hooks.example.com/memory", "secretRef": REF},
            {"url": "https://siem.example.org:8443/in?source=memory", "secretRef": {**REF, "key": "siem"}},
        ],
    },
    "status": {
        "webhooks": [
            {"url": "https://hooks.example.com/memory", "state": "Active", "deadLetters": 0},
            {
                "url": "https://siem.example.org:8443/in?source=memory",
                "state": "Refused",
                "reason": "SecretNotFound",
                "message": "spec.webhooks[1].secretRef: Secret hooks/notes-webhook does not exist.",
            },
        ]
    },
}


def test_the_schema_and_the_store_share_their_limits() -> None:
    spec = version_schema(CRDS["Space"])["properties"]["spec"]["properties"]["webhooks"]
    assert spec["maxItems"] == webhooks.MAX_DECLARED
    assert spec["x-kubernetes-list-type"] == "map" and spec["x-kubernetes-list-map-keys"] == ["url"]
    assert spec["items"]["properties"]["url"]["maxLength"] == webhooks.MAX_URL
    assert set(spec["items"]["required"]) == {"url", "secretRef"}
    assert set(spec["items"]["properties"]["secretRef"]["required"]) == {"namespace", "name", "key"}
    status = version_schema(CRDS["Space"])["properties"]["status"]["properties"]["webhooks"]
    assert status["maxItems"] == webhooks.MAX_DECLARED
    assert status["items"]["properties"]["state"]["enum"] == ["Active", "Refused"]


def test_a_space_with_webhooks_passes_both() -> None:
    assert validation_errors(CRDS["Space"], SPACE) == []
    parsed = SpaceSpec.parse(SPACE["spec"])
    assert [(h.url, h.secret_ref.key) for h in parsed.webhooks] == [
        ("https://hooks.example.com/memory", "signing"),
        ("https://siem.example.org:8443/in?source=memory", "siem"),
    ]
    assert SpaceSpec.parse({"displayName": "Notes"}).webhooks == ()


@pytest.mark.parametrize(
    ("path", "value", "schema_says", "parser_field"),
    [
        ("spec.webhooks.0.url", "ftp://hooks.example.com/x", "does not match", "spec.webhooks[0].url"),
        ("spec.webhooks.0.url", "https://h.example/" + "a" * 2000, "is too long", "spec.webhooks[0].url"),
        ("spec.webhooks.0.url", ..., "'url' is a required property", "spec.webhooks[0].url"),
        (
            "spec.webhooks.1.url",
            "https://hooks.example.com/memory",
            "duplicate entry",
            "spec.webhooks[1].url",
        ),
        (
            "spec.webhooks.0.secretRef.key",
            ...,
            "'key' is a required property",
            "spec.webhooks[0].secretRef.key",
        ),
        ("spec.webhooks.0.secretRef.key", "a/b", "does not match", "spec.webhooks[0].secretRef.key"),
        (
            "spec.webhooks.0.secretRef.namespace",
            ...,
            "'namespace' is a required",
            "spec.webhooks[0].secretRef.namespace",
        ),
        ("spec.webhooks.0.secret", "whsec_x", "Additional properties", "spec.webhooks[0].secret"),
        (
            "spec.webhooks",
            [{"url": f"https://h{i}.example.com/", "secretRef": REF} for i in range(17)],
            "is too long",
            "spec.webhooks",
        ),
    ],
)
def test_a_mistake_is_refused_by_both(path: str, value: Any, schema_says: str, parser_field: str) -> None:
    broken = changed(SPACE, path, value)
    found = validation_errors(CRDS["Space"], broken)
    assert any(schema_says in error for error in found), found
    with pytest.raises(ValidationError) as refused:
        SpaceSpec.parse(broken["spec"])
    assert parser_field in str(refused.value)


async def test_credentials_in_a_url_are_refused_by_the_schema_and_the_address_guard() -> None:
    url = "https://user:pw@hooks.example.com/memory"
    found = validation_errors(CRDS["Space"], changed(SPACE, "spec.webhooks.0.url", url))
    assert any("does not match" in error for error in found), found
    with pytest.raises(webhooks.ReceiverRefused, match="without credentials"):
        await webhooks.check_receiver(url, allow_loopback=False)
