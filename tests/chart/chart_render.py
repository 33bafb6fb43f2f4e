"""Scenarios, constants and small queries over rendered manifests, shared by the chart tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "charts" / "memory-mcp"
RELEASE = "memory"
NAMESPACE = "memory-mcp"
# The newest schema set kubernetes-validate ships at the time of writing; the chart needs >= 1.28.
KUBE_VERSION = "1.33.0"

Manifest = dict[str, Any]
Renderer = Callable[[dict[str, Any]], list[Manifest]]

MONITORING_ON: dict[str, Any] = {
    "serviceMonitor": {"enabled": True},
    "prometheusRule": {"enabled": True},
    "dashboard": {"enabled": True},
}

SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "embedder-gpu": {"embedder": {"enabled": True}},
    "embedder-off": {"embedder": {"enabled": False}, "ingress": {"enabled": True}},
    "external-db": {"database": {"external": {"secretName": "pg-dsn", "secretKey": "dsn"}}},
    "cloudnativepg": {"database": {"cloudnativepg": {"enabled": True}}},
    "monitoring": {"monitoring": MONITORING_ON},
    "everything": {
        "embedder": {"enabled": True},
        "database": {"cloudnativepg": {"enabled": True}},
        "monitoring": MONITORING_ON,
        "ingress": {"enabled": True, "className": "traefik"},
        "operator": {"secretNamespaces": ["apps", "team-a"]},
    },
}


def parse_manifests(rendered: dict[str, str]) -> list[Manifest]:
    """Every non-empty YAML document of a render, in template order."""
    manifests: list[Manifest] = []
    for path in sorted(rendered):
        manifests.extend(doc for doc in yaml.safe_load_all(rendered[path]) if doc)
    return manifests


# Kinds the chart renders that are not built into Kubernetes (their operators must be installed).
CUSTOM_KINDS = {"RayService", "ServiceMonitor", "PrometheusRule", "Cluster"}


def of_kind(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [m for m in manifests if m["kind"] == kind]


def one(manifests: list[Manifest], kind: str, name_suffix: str = "") -> Manifest:
    """The single manifest of `kind` whose name ends with `name_suffix`."""
    found = [m for m in of_kind(manifests, kind) if m["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, (
        f"expected one {kind} named *{name_suffix}, found {[m['metadata']['name'] for m in found]}"
    )
    return found[0]


def pod_specs(manifest: Manifest) -> Iterator[dict[str, Any]]:
    """Every pod spec a workload manifest carries (RayService head and worker groups included)."""
    kind = manifest["kind"]
    if kind in {"Deployment", "Job", "StatefulSet", "DaemonSet"}:
        yield manifest["spec"]["template"]["spec"]
    elif kind == "RayService":
        cluster = manifest["spec"]["rayClusterConfig"]
        yield cluster["headGroupSpec"]["template"]["spec"]
        for group in cluster["workerGroupSpecs"]:
            yield group["template"]["spec"]


def containers(manifest: Manifest) -> Iterator[dict[str, Any]]:
    for spec in pod_specs(manifest):
        yield from spec.get("initContainers", [])
        yield from spec["containers"]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A container's environment as {name: EnvVar}."""
    return {var["name"]: var for var in container.get("env", [])}


def pod_labels(manifest: Manifest) -> list[dict[str, str]]:
    """Labels of the pods a workload creates."""
    if manifest["kind"] == "RayService":
        cluster = manifest["spec"]["rayClusterConfig"]
        groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
        return [group["template"]["metadata"]["labels"] for group in groups]
    return [manifest["spec"]["template"]["metadata"]["labels"]]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())
