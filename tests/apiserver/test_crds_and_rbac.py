"""The CRDs and the chart's operator RBAC, installed into a real API server."""

from __future__ import annotations

from typing import Any

import pytest

from tests.apiserver.kube import ApiError, Kube
from tests.chart.chart_render import NAMESPACE

pytestmark = pytest.mark.apiserver


async def test_crds_are_established_with_their_names_and_columns(
    kube: Kube, installed: list[dict[str, Any]]
) -> None:
    assert sorted(crd["spec"]["names"]["kind"] for crd in installed) == ["ApiKey", "Space", "User"]
    for crd in installed:
        name = crd["metadata"]["name"]
        stored = await kube.get_path(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        assert stored is not None
        conditions = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
        assert conditions["Established"] == conditions["NamesAccepted"] == "True", conditions
        assert stored["status"]["acceptedNames"]["kind"] == crd["spec"]["names"]["kind"]
        (version,) = stored["spec"]["versions"]
        assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
        assert [c["name"] for c in version["additionalPrinterColumns"]] == [
            c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]
        ]
    discovery = await kube.get_path("/apis/memory-mcp.io/v1alpha1")
    assert discovery is not None
    served = {r["name"]: r for r in discovery["resources"]}
    assert {"spaces", "spaces/status", "users", "users/status", "apikeys", "apikeys/status"} <= set(served)
    assert served["apikeys"]["namespaced"] is False
    assert "mkey" in served["apikeys"].get("shortNames", [])


@pytest.mark.parametrize(
    ("kind", "spec", "field"),
    [
        ("Space", {"description": "no display name"}, "spec.displayName"),
        ("Space", {"displayName": "S", "deletionPolicy": "Keep"}, "spec.deletionPolicy"),
        ("Space", {"displayName": "S", "quotas": {"maxPdfPages": 0}}, "spec.quotas.maxPdfPages"),
        ("Space", {"displayName": "S", "quotas": {"maxMediaSeconds": 1.5}}, "spec.quotas.maxMediaSeconds"),
        (
            "ApiKey",
            {
                "user": "ada",
                "grants": [{"space": "alpha", "access": "Write"}],
                "secretRef": {"namespace": "agents", "name": "k"},
            },
            "spec.grants.access",
        ),
        ("User", {"email": "ada@example.com", "displayName": "Ada", "role": "Admin"}, "spec.role"),
    ],
)
async def test_the_api_server_enforces_the_openapi_schema(
    kube: Kube, installed: list[dict[str, Any]], kind: str, spec: dict[str, Any], field: str
) -> None:
    with pytest.raises(ApiError) as refused:
        await kube.create_object(kind, f"invalid-{kind.lower()}", spec)
    assert refused.value.status == 422
    assert field in refused.value.body["message"], refused.value.body["message"]


async def test_the_operator_identity_has_only_the_charts_role(
    kube: Kube, operator_kube: Kube, installed: list[dict[str, Any]], rbac: list[dict[str, Any]]
) -> None:
    (account,) = (m for m in rbac if m["kind"] == "ServiceAccount")
    assert account["metadata"]["namespace"] == NAMESPACE
    assert await kube.get_path(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{account['metadata']['name']}"
    )
    may = {
        "list apikeys": ("GET", "/apis/memory-mcp.io/v1alpha1/apikeys"),
        "list crds": ("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"),
        "list namespaces": ("GET", "/api/v1/namespaces"),
    }
    may_not = {
        "list secrets": ("GET", "/api/v1/secrets"),
        "list secrets of a namespace": ("GET", "/api/v1/namespaces/agents/secrets"),
        "create apikeys": ("POST", "/apis/memory-mcp.io/v1alpha1/apikeys"),
        "delete spaces": ("DELETE", "/apis/memory-mcp.io/v1alpha1/spaces/anything"),
        "read configmaps": ("GET", "/api/v1/namespaces/kube-system/configmaps"),
        "change its role": ("DELETE", "/apis/rbac.authorization.k8s.io/v1/clusterroles/anything"),
    }
    for what, (method, path) in may.items():
        assert await operator_kube.status_of(method, path) == 200, what
    for what, (method, path) in may_not.items():
        body = {"apiVersion": "memory-mcp.io/v1alpha1", "kind": "ApiKey"} if method == "POST" else None
        assert await operator_kube.status_of(method, path, body) == 403, what
