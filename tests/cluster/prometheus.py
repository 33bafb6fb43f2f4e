"""Debian's Prometheus inside the node's network namespace, finding pods through the API server.

Debian builds Prometheus without its Kubernetes service discovery (``kubernetes_sd_configs`` is
not a field it knows), so a discovery loop here does what that would: it lists the release's pods
from the API server every two seconds and writes, for each running pod, the container port named
``http`` (the server) or ``metrics`` (the operator) into a ``file_sd_configs`` file, labelled with
the pod's ``app.kubernetes.io/component``, name and namespace. Prometheus loads the chart's alert
rules (the PrometheusRule the chart renders with ``monitoring.prometheusRule.enabled``).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from types import TracebackType
from typing import Any

import httpx2
import yaml

from tests.apiserver.controlplane import Process
from tests.cluster.node import Node
from tests.observability.rules import rendered_rule_groups


class NodePrometheus:
    def __init__(self, node: Node, namespace: str) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("Prometheus is missing: run scripts/cluster (it installs Debian's prometheus)")
        self.node = node
        self.workdir = node.root / "prometheus"
        self.workdir.mkdir(exist_ok=True)
        self.namespace = namespace
        self.targets = self.workdir / "targets.json"
        self.targets.write_text("[]")
        (self.workdir / "rules.yaml").write_text(
            yaml.safe_dump({"groups": rendered_rule_groups()}, sort_keys=False)
        )
        config = {
            "global": {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "2s"},
            "rule_files": [str(self.workdir / "rules.yaml")],
            "scrape_configs": [
                {
                    "job_name": "memory-mcp",
                    "file_sd_configs": [{"files": [str(self.targets)], "refresh_interval": "2s"}],
                }
            ],
        }
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.process = Process(
            "prometheus",
            node.in_netns(
                binary,
                f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                "--web.listen-address=127.0.0.1:9090",
            ),
            node.root / "logs" / "prometheus.log",
        )
        self.http: httpx2.Client | None = None
        self._stop = threading.Event()
        self._discovery = threading.Thread(target=self._discover, name="pod-discovery", daemon=True)

    def _discover(self) -> None:
        """The pods' scrape targets from the API server, as Kubernetes service discovery would."""
        while not self._stop.is_set():
            listed = self.node.kubectl("-n", self.namespace, "get", "pods", "-o", "json", check=False)
            if listed:
                groups = []
                for pod in json.loads(listed)["items"]:
                    if pod["status"].get("phase") != "Running" or not pod["status"].get("podIP"):
                        continue
                    for container in pod["spec"]["containers"]:
                        for port in container.get("ports", []):
                            if port.get("name") in ("http", "metrics"):
                                labels = pod["metadata"].get("labels", {})
                                groups.append(
                                    {
                                        "targets": [f"{pod['status']['podIP']}:{port['containerPort']}"],
                                        "labels": {
                                            "component": labels.get("app.kubernetes.io/component", ""),
                                            "pod": pod["metadata"]["name"],
                                            "namespace": pod["metadata"]["namespace"],
                                        },
                                    }
                                )
                partial = self.targets.with_suffix(".tmp")
                partial.write_text(json.dumps(groups))
                partial.replace(self.targets)
            self._stop.wait(2)

    def __enter__(self) -> NodePrometheus:
        self._discovery.start()
        self.process.start()
        port = self.node.expose("127.0.0.1:9090", "prometheus")
        self.http = httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if self.http.get("/-/ready").status_code == 200:
                    return self
            except httpx2.HTTPError:
                pass
            if not self.process.running():
                break
            time.sleep(0.5)
        raise RuntimeError(f"Prometheus did not become ready:\n{self.process.tail()}")

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._discovery.join(timeout=30)
        if self.http is not None:
            self.http.close()
        self.process.stop()

    def _get(self, path: str, **params: str) -> Any:
        assert self.http is not None
        answer = self.http.get(path, params=params).json()
        assert answer["status"] == "success", answer
        return answer["data"]

    def targets_up(self) -> dict[str, int]:
        """Healthy scrape targets per component."""
        counts: dict[str, int] = {}
        for target in self._get("/api/v1/targets")["activeTargets"]:
            if target["health"] == "up":
                component = target["labels"].get("component", "")
                counts[component] = counts.get(component, 0) + 1
        return counts

    def wait_for_targets(self, wanted: dict[str, int], timeout_s: float) -> dict[str, int]:
        deadline = time.monotonic() + timeout_s
        counts: dict[str, int] = {}
        while time.monotonic() < deadline:
            counts = self.targets_up()
            if all(counts.get(k, 0) >= v for k, v in wanted.items()):
                return {k: counts.get(k, 0) for k in wanted}
            time.sleep(1)
        return counts

    def series_count(self, selector: str) -> int:
        return len(self._get("/api/v1/series", **{"match[]": selector}))

    def rule_groups(self) -> list[dict[str, Any]]:
        groups: list[dict[str, Any]] = self._get("/api/v1/rules")["groups"]
        return groups
