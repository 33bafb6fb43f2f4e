"""The release on the node: images imported, PostgreSQL beside the node, the chart installed by Helm.

Shared by the cluster tier's tests (tests/cluster/conftest.py) and bench/cluster_load.py.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from tests.chart.chart_render import CHART_DIR, REPO_ROOT
from tests.cluster.node import Node, cluster_dir

RELEASE = "memory-mcp"
NAMESPACE = "memory-mcp"
SECRET_NAMESPACE = "agents"
IMAGE_TAG = "dev"
# The rolling-update test moves the release to this tag: the same build, imported under a new name.
NEXT_TAG = "next"
READY_TIMEOUT_S = 600


@dataclass
class Deployment:
    """The installed release: the node, the Service's address on the host, the database DSN."""

    node: Node
    base_url: str
    dsn: str
    manifest: str = ""  # what Helm rendered and applied at install
    install_seconds: float = 0.0

    def kubectl(self, *args: str, **kwargs: Any) -> str:
        return self.node.kubectl(*args, **kwargs)

    def pods(self, component: str) -> list[dict[str, Any]]:
        out = self.kubectl(
            "-n", NAMESPACE, "get", "pods", "-l", f"app.kubernetes.io/component={component}", "-o", "json"
        )
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items

    def ready_pods(self, component: str) -> list[dict[str, Any]]:
        return [p for p in self.pods(component) if _ready(p) and not p["metadata"].get("deletionTimestamp")]

    def wait_ready(
        self, component: str, count: int, timeout_s: float = READY_TIMEOUT_S
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pods = self.ready_pods(component)
            if len(pods) >= count:
                return pods
            time.sleep(2)
        raise AssertionError(
            f"{component}: {count} ready pods not there in {timeout_s:.0f} s\n{self.describe()}"
        )

    def secret_value(self, namespace: str, name: str, key: str, timeout_s: float = 60) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            out = self.kubectl("-n", namespace, "get", "secret", name, "-o", "json", check=False)
            if out:
                return base64.b64decode(json.loads(out)["data"][key]).decode()
            time.sleep(0.5)
        raise AssertionError(f"secret {namespace}/{name} not written in {timeout_s:.0f} s")

    def describe(self) -> str:
        pods = self.kubectl("-n", NAMESPACE, "get", "pods", "-o", "wide", check=False)
        events = self.kubectl("-n", NAMESPACE, "get", "events", "--sort-by=.lastTimestamp", check=False)
        return f"{pods}\n{events[-4000:]}\n{self.node.logs(15)}"


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def chart_values(tag: str = IMAGE_TAG) -> dict[str, Any]:
    """The chart's values for this node: local images, never pulled; everything else the defaults."""
    return {
        "image": {"tag": tag, "pullPolicy": "Never"},
        "server": {
            "image": {"repository": "localhost/memory-mcp-server"},
            # Two cores in all: requests small enough that a surge pod of a rolling update fits.
            "resources": {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"memory": "3Gi"}},
        },
        "operator": {
            "image": {"repository": "localhost/memory-mcp-operator"},
            "secretNamespaces": [SECRET_NAMESPACE],
        },
    }


def helm_config(node: Node) -> Any:
    from helm_python import Config

    return Config(kubeconfig_path=str(node.kubeconfig), namespace=NAMESPACE)


def helm(node: Node, action: str, tag: str, timeout_s: int = READY_TIMEOUT_S) -> dict[str, Any]:
    """``helm install|upgrade --skip-crds`` of the chart with the tier's values at ``tag``.

    Helm 4 installs a chart's CRDs by server-side apply, which an API server before 1.25 refuses
    for the CRDs' CEL rules (``x-kubernetes-validations: field not declared in schema``); the
    operations guide's way for such clusters is to apply them with kubectl first (client-side: the
    API server drops the rules it does not know) and install with ``--skip-crds``. helm-python-sdk
    does not expose that switch, so the options go to its library call directly."""
    from helm_python import _native
    from helm_python.config import _loads_obj

    values = chart_values(tag)
    options = {"namespace": NAMESPACE, "timeout_seconds": timeout_s, "skip_crds": True}
    with helm_config(node) as config:
        payload = _native.call_string(
            f"helm_{action}",
            config._raw(),
            config._context_arg(None),
            *config._chart_args(str(CHART_DIR)),
            RELEASE,
            json.dumps(values),
            json.dumps(options),
        )
    return _loads_obj(payload)


class ImagesMissing(Exception):
    pass


def install_release(node: Node) -> Deployment:
    """Import the images, start the database, install the chart; wait for two servers and the operator."""
    images = cluster_dir() / "images"
    for component in ("server", "operator"):
        archive = images / f"{component}-{IMAGE_TAG}.tar"
        if not archive.exists():
            raise ImagesMissing(f"{archive} is missing: run scripts/cluster first")
        node.import_image(archive)
    dsn = node.start_postgres(secrets.token_hex(12))
    node.kubectl("create", "namespace", NAMESPACE)
    node.kubectl("create", "namespace", SECRET_NAMESPACE)
    node.kubectl(
        "-n", NAMESPACE, "create", "secret", "generic", "memory-mcp-database", f"--from-literal=url={dsn}"
    )
    started = time.monotonic()
    node.kubectl("apply", "--validate=false", "-f", str(REPO_ROOT / "crds"))
    release = helm(node, "install", IMAGE_TAG)
    deployment = Deployment(node, "", dsn, release["manifest"])
    deployment.wait_ready("server", 2)
    deployment.wait_ready("operator", 1)
    deployment.install_seconds = time.monotonic() - started
    port = node.expose(f"{service_ip(deployment)}:80", "server")
    deployment.base_url = f"http://127.0.0.1:{port}"
    return deployment


def service_ip(deployment: Deployment) -> str:
    out = deployment.kubectl("-n", NAMESPACE, "get", "service", f"{RELEASE}-server", "-o", "json")
    ip: str = json.loads(out)["spec"]["clusterIP"]
    return ip
