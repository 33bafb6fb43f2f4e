"""Properties the chart promises: hardening, probes, wiring between components, least privilege."""

from __future__ import annotations

import json

from tests.chart.chart_render import (
    CHART_DIR,
    NAMESPACE,
    Manifest,
    Renderer,
    containers,
    env_of,
    of_kind,
    one,
    pod_labels,
    pod_specs,
    selects,
)

WORKLOAD_KINDS = ("Deployment", "Job", "RayService")


def workloads(manifests: list[Manifest]) -> list[Manifest]:
    return [m for m in manifests if m["kind"] in WORKLOAD_KINDS]


def test_every_container_is_hardened(scenario_manifests: list[Manifest]) -> None:
    for workload in workloads(scenario_manifests):
        for spec in pod_specs(workload):
            assert spec["securityContext"]["runAsNonRoot"] is True
            assert spec["securityContext"]["runAsUser"] != 0
            assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
            mounts_tmp = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
            assert "tmp" in mounts_tmp
        for container in containers(workload):
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"]
            assert any(m["mountPath"] == "/tmp" for m in container["volumeMounts"])
            assert container["resources"]["requests"], container["name"]


def test_server_runs_serve_with_probes(defaults: list[Manifest]) -> None:
    deployment = one(defaults, "Deployment", "-server")
    (server,) = containers(deployment)
    assert server["command"] == ["memory-mcp", "serve", "--host", "0.0.0.0", "--port", "8765"]
    assert server["ports"] == [{"name": "http", "containerPort": 8765, "protocol": "TCP"}]
    assert server["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert server["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert server["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_server_reads_the_database_url_from_the_external_secret(render: Renderer) -> None:
    manifests = render({"database": {"external": {"secretName": "pg-dsn", "secretKey": "dsn"}}})
    for workload in workloads(manifests):
        for container in containers(workload):
            url = env_of(container)["MEMORY_MCP_DATABASE_URL"]
            assert url["valueFrom"]["secretKeyRef"] == {"name": "pg-dsn", "key": "dsn"}
    assert of_kind(manifests, "Cluster") == []


def test_cloudnativepg_app_secret_feeds_every_component(render: Renderer) -> None:
    manifests = render({"database": {"cloudnativepg": {"enabled": True}}})
    cluster = one(manifests, "Cluster")
    expected = {"name": f"{cluster['metadata']['name']}-app", "key": "uri"}
    consumers = [m for m in workloads(manifests) if m["kind"] in {"Deployment", "Job"}]
    assert {m["metadata"]["name"].rsplit("-", 1)[1] for m in consumers} == {"server", "operator", "migrate"}
    for workload in consumers:
        for container in containers(workload):
            assert env_of(container)["MEMORY_MCP_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == expected


def test_embedder_on_points_the_server_at_the_ray_serve_service(render: Renderer) -> None:
    manifests = render({"embedder": {"enabled": True}})
    rayservice = one(manifests, "RayService")
    (server,) = containers(one(manifests, "Deployment", "-server"))
    url = env_of(server)["MEMORY_MCP_EMBEDDER_URL"]["value"]
    assert url == f"http://{rayservice['metadata']['name']}-serve-svc.{NAMESPACE}.svc:8000"


def test_embedder_off_means_in_process_embedding(defaults: list[Manifest]) -> None:
    (server,) = containers(one(defaults, "Deployment", "-server"))
    assert "MEMORY_MCP_EMBEDDER_URL" not in env_of(server)
    assert of_kind(defaults, "RayService") == []


def test_operator_is_a_single_recreated_pod(defaults: list[Manifest]) -> None:
    deployment = one(defaults, "Deployment", "-operator")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    (operator,) = containers(deployment)
    assert operator["command"] == ["memory-mcp", "operator"]
    assert operator["ports"][0]["containerPort"] == 8080
    assert operator["livenessProbe"]["httpGet"]["path"] == "/healthz"
    service = one(defaults, "Service", "-operator-metrics")
    assert service["spec"]["ports"][0]["port"] == 8080


def test_rbac_has_no_wildcards(scenario_manifests: list[Manifest]) -> None:
    for role in of_kind(scenario_manifests, "ClusterRole") + of_kind(scenario_manifests, "Role"):
        for rule in role["rules"]:
            for field in ("verbs", "resources", "apiGroups"):
                assert "*" not in rule.get(field, []), (role["metadata"]["name"], rule)


def _verbs(role: Manifest, group: str, resource: str) -> set[str]:
    return {
        verb
        for rule in role["rules"]
        if group in rule["apiGroups"] and resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_operator_cluster_role_is_least_privilege(defaults: list[Manifest]) -> None:
    role = one(defaults, "ClusterRole")
    for plural in ("spaces", "users", "apikeys"):
        assert _verbs(role, "memory-mcp.io", plural) == {"get", "list", "watch", "patch", "update"}
        assert _verbs(role, "memory-mcp.io", f"{plural}/status") == {"get", "patch", "update"}
        assert _verbs(role, "memory-mcp.io", f"{plural}/finalizers") == {"update"}
    assert _verbs(role, "", "secrets") == {"create", "get", "patch", "delete"}
    assert _verbs(role, "", "events") == {"create"}
    assert _verbs(role, "apiextensions.k8s.io", "customresourcedefinitions") == {"list", "watch"}
    assert _verbs(role, "", "namespaces") == {"list", "watch"}
    granted = {resource for rule in role["rules"] for resource in rule["resources"]}
    assert "pods" not in granted and "configmaps" not in granted

    binding = one(defaults, "ClusterRoleBinding")
    service_account = one(defaults, "ServiceAccount", "-operator")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": service_account["metadata"]["name"], "namespace": NAMESPACE}
    ]
    operator = one(defaults, "Deployment", "-operator")
    assert operator["spec"]["template"]["spec"]["serviceAccountName"] == service_account["metadata"]["name"]


def test_secret_access_narrows_to_listed_namespaces(everything: list[Manifest]) -> None:
    assert _verbs(one(everything, "ClusterRole"), "", "secrets") == set()
    roles = of_kind(everything, "Role")
    assert {r["metadata"]["namespace"] for r in roles} == {"apps", "team-a"}
    for role in roles:
        assert _verbs(role, "", "secrets") == {"create", "get", "patch", "delete"}
    assert {b["metadata"]["namespace"] for b in of_kind(everything, "RoleBinding")} == {"apps", "team-a"}


def test_ingress_terminates_tls_for_its_host(everything: list[Manifest]) -> None:
    ingress = one(everything, "Ingress")
    spec = ingress["spec"]
    assert spec["ingressClassName"] == "traefik"
    (rule,) = spec["rules"]
    assert spec["tls"] == [{"hosts": [rule["host"]], "secretName": "memory-mcp-tls"}]
    paths = {p["path"] for p in rule["http"]["paths"]}
    oauth = {"/.well-known/oauth-protected-resource", "/.well-known/oauth-authorization-server"}
    oauth |= {"/.well-known/jwks.json", "/authorize", "/token", "/revoke", "/register"}
    assert paths == {"/mcp", "/v1"} | oauth
    assert "/metrics" not in paths


def test_hpa_and_pdb_target_the_server(defaults: list[Manifest]) -> None:
    deployment = one(defaults, "Deployment", "-server")
    assert "replicas" not in deployment["spec"]
    hpa = one(defaults, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert hpa["spec"]["minReplicas"] >= 2
    pdb = one(defaults, "PodDisruptionBudget")
    assert selects(pdb["spec"]["selector"]["matchLabels"], pod_labels(deployment)[0])


def test_fixed_replicas_without_autoscaling(render: Renderer) -> None:
    manifests = render({"server": {"autoscaling": {"enabled": False}, "replicas": 3}})
    assert one(manifests, "Deployment", "-server")["spec"]["replicas"] == 3
    assert of_kind(manifests, "HorizontalPodAutoscaler") == []


def test_services_and_network_policies_select_rendered_pods(scenario_manifests: list[Manifest]) -> None:
    labels = [label for workload in workloads(scenario_manifests) for label in pod_labels(workload)]
    for service in of_kind(scenario_manifests, "Service"):
        selector = {k: v for k, v in service["spec"]["selector"].items() if not k.startswith("ray.io/")}
        assert any(selects(selector, pod) for pod in labels), service["metadata"]["name"]
    for policy in of_kind(scenario_manifests, "NetworkPolicy"):
        selector = policy["spec"]["podSelector"]["matchLabels"]
        if "cnpg.io/cluster" in selector:
            assert selector["cnpg.io/cluster"] == one(scenario_manifests, "Cluster")["metadata"]["name"]
        else:
            assert any(selects(selector, pod) for pod in labels), policy["metadata"]["name"]


def test_dashboard_configmap_carries_the_dashboard_file(everything: list[Manifest]) -> None:
    configmap = one(everything, "ConfigMap", "-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART_DIR / "dashboards" / "memory-mcp.json").read_text())
    assert json.loads(configmap["data"]["memory-mcp.json"]) == shipped


def test_migrations_run_as_a_hook_before_upgrades(defaults: list[Manifest]) -> None:
    job = one(defaults, "Job", "-migrate")
    hooks = set(job["metadata"]["annotations"]["helm.sh/hook"].split(","))
    # Before the install's resources with an external database: `helm install --wait` waits for
    # servers that are only ready once the schema is there.
    assert hooks == {"pre-install", "pre-upgrade"}
    assert "serviceAccountName" not in job["spec"]["template"]["spec"]
    (migrate,) = containers(job)
    assert migrate["command"] == ["memory-mcp", "migrate"]
