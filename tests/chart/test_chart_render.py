"""The chart renders, lints strictly and produces valid manifests in every scenario."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml
from helm_python.chart import Chart, lint
from helm_python.errors import HelmRenderError, HelmValuesError

from tests.chart.chart_render import (
    CHART_DIR,
    CUSTOM_KINDS,
    KUBE_VERSION,
    NAMESPACE,
    RELEASE,
    Manifest,
    Renderer,
    of_kind,
    one,
    pod_specs,
)


def test_lint_is_strictly_clean(scenario_values: dict[str, Any]) -> None:
    report = lint(
        CHART_DIR, scenario_values, strict=True, namespace=NAMESPACE, kube_version=f"v{KUBE_VERSION}"
    )
    assert report["errors"] == []
    # Severity 1 is informational (e.g. "icon is recommended"); warnings and errors are not accepted.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_builtin_kinds_are_valid_kubernetes(scenario_manifests: list[Manifest]) -> None:
    builtin = [m for m in scenario_manifests if m["kind"] not in CUSTOM_KINDS]
    assert builtin
    for manifest in builtin:
        # Raises SchemaNotFoundError for a kind that is neither built in nor listed as custom.
        kubernetes_validate.validate(manifest, KUBE_VERSION, strict=True)


def test_every_manifest_is_namespaced_to_the_release(scenario_manifests: list[Manifest]) -> None:
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding"}
    secret_namespaces = {"apps", "team-a"}
    for manifest in scenario_manifests:
        namespace = manifest["metadata"].get("namespace")
        if manifest["kind"] in cluster_scoped:
            assert namespace is None
        elif manifest["kind"] in {"Role", "RoleBinding"}:
            assert namespace in secret_namespaces
        else:
            assert namespace == NAMESPACE, manifest["metadata"]["name"]


def test_optional_kinds_are_off_by_default(defaults: list[Manifest]) -> None:
    assert {m["kind"] for m in defaults} & CUSTOM_KINDS == set()
    assert of_kind(defaults, "Ingress") == []


def test_rayservice_pod_templates_are_valid_pods(render: Renderer) -> None:
    rayservice = one(render({"embedder": {"enabled": True}}), "RayService")
    for spec in pod_specs(rayservice):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"}, "spec": spec}
        kubernetes_validate.validate(pod, KUBE_VERSION, strict=True)


def test_rayservice_required_fields(render: Renderer) -> None:
    manifest = one(render({"embedder": {"enabled": True}}), "RayService")
    assert manifest["apiVersion"] == "ray.io/v1"
    spec = manifest["spec"]
    serve_config = yaml.safe_load(spec["serveConfigV2"])
    (application,) = serve_config["applications"]
    assert application["import_path"] == "memory_mcp.embedder.serve:app_builder"
    assert application["route_prefix"] == "/"
    assert "args" not in application
    max_batch = int(application["runtime_env"]["env_vars"]["MEMORY_MCP_EMBEDDER_MAX_BATCH"])
    (deployment,) = application["deployments"]
    assert deployment["name"]
    assert deployment["max_ongoing_requests"] >= max_batch
    assert deployment["ray_actor_options"]["num_gpus"] > 0

    cluster = spec["rayClusterConfig"]
    assert cluster["rayVersion"]
    head = cluster["headGroupSpec"]
    assert isinstance(head["rayStartParams"], dict)
    assert head["template"]["spec"]["containers"]
    assert cluster["workerGroupSpecs"]
    for group in cluster["workerGroupSpecs"]:
        assert group["groupName"]
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        assert isinstance(group["rayStartParams"], dict)
        (worker,) = group["template"]["spec"]["containers"]
        assert int(worker["resources"]["limits"]["nvidia.com/gpu"]) >= 1


def test_rayservice_can_use_an_application_builder(render: Renderer) -> None:
    serve = {"importPath": "memory_mcp.embedder.serve:app_builder", "args": {"num_gpus": 1, "device": "cuda"}}
    manifest = one(render({"embedder": {"enabled": True, "serve": serve}}), "RayService")
    (application,) = yaml.safe_load(manifest["spec"]["serveConfigV2"])["applications"]
    assert application["import_path"] == "memory_mcp.embedder.serve:app_builder"
    assert application["args"] == {"num_gpus": 1, "device": "cuda"}


def test_rayservice_refuses_batches_that_cannot_fill(chart: Chart) -> None:
    values = {"embedder": {"enabled": True, "serve": {"maxBatchSize": 64, "maxOngoingRequests": 5}}}
    with pytest.raises(HelmRenderError, match="maxOngoingRequests"):
        chart.render(values=values, name=RELEASE, namespace=NAMESPACE)


def test_cloudnativepg_cluster_required_fields(render: Renderer) -> None:
    cluster = one(render({"database": {"cloudnativepg": {"enabled": True}}}), "Cluster")
    assert cluster["apiVersion"] == "postgresql.cnpg.io/v1"
    spec = cluster["spec"]
    assert spec["instances"] >= 1
    assert spec["imageName"]
    assert spec["storage"]["size"]
    initdb = spec["bootstrap"]["initdb"]
    assert initdb["database"] and initdb["owner"]
    statements = [s.upper() for s in initdb["postInitApplicationSQL"]]
    assert "CREATE EXTENSION IF NOT EXISTS VECTOR" in statements
    assert "CREATE EXTENSION IF NOT EXISTS PG_TRGM" in statements
    # The statements the server's start-up check asks for (store/src/memory_mcp/store/embedded.py LEAKPROOF_FUNCTIONS).
    from memory_mcp.store.embedded import LEAKPROOF_FUNCTIONS

    for function in LEAKPROOF_FUNCTIONS:
        assert f"ALTER FUNCTION {function} LEAKPROOF".upper() in statements


def test_servicemonitors_point_at_rendered_service_ports(render: Renderer) -> None:
    manifests = render({"embedder": {"enabled": True}, "monitoring": {"serviceMonitor": {"enabled": True}}})
    monitors = of_kind(manifests, "ServiceMonitor")
    assert {m["metadata"]["labels"]["app.kubernetes.io/component"] for m in monitors} == {
        "server",
        "operator",
        "embedder",
    }
    services = of_kind(manifests, "Service")
    for monitor in monitors:
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        selector = monitor["spec"]["selector"]["matchLabels"]
        matched = [
            s for s in services if all(s["metadata"]["labels"].get(k) == v for k, v in selector.items())
        ]
        assert matched, monitor["metadata"]["name"]
        port_names = {p["name"] for s in matched for p in s["spec"]["ports"]}
        assert monitor["spec"]["endpoints"]
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint["port"] in port_names
            assert endpoint["path"] == "/metrics"


def test_prometheusrule_required_fields(render: Renderer) -> None:
    rule = one(render({"monitoring": {"prometheusRule": {"enabled": True}}}), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    groups = rule["spec"]["groups"]
    assert groups
    for group in groups:
        assert group["name"] and group["rules"]
        for alert in group["rules"]:
            assert alert["alert"] and alert["expr"] and alert["for"]
            assert alert["labels"]["severity"] in {"warning", "critical"}
            assert {"summary", "description", "runbook"} <= set(alert["annotations"])


def test_values_schema_rejects_unknown_keys(chart: Chart) -> None:
    with pytest.raises(HelmValuesError):
        chart.render(values={"server": {"replica": 3}}, name=RELEASE, namespace=NAMESPACE)
