"""The image and the skaffold loop agree with the package layout and with the chart."""

from __future__ import annotations

import re
import tomllib
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helm_python import parse_set_string

from tests.chart.chart_render import CHART_DIR, KUBE_VERSION, REPO_ROOT, Renderer, containers, of_kind

DOCKERFILE = (REPO_ROOT / "Dockerfile").read_text()
SKAFFOLD = yaml.safe_load((REPO_ROOT / "skaffold.yaml").read_text())


def component_folders() -> set[str]:
    """The workspace's members: the folders that are distributions (memory_mcp, store, server, ...)."""
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    return set(pyproject["tool"]["uv"]["workspace"]["members"])


def dockerfile_instructions(keyword: str) -> list[str]:
    return [
        line[len(keyword) :].strip() for line in DOCKERFILE.splitlines() if line.startswith(keyword + " ")
    ]


def dev_profile() -> dict[str, Any]:
    (profile,) = [p for p in SKAFFOLD["profiles"] if p["name"] == "dev"]
    return {patch["path"]: patch["value"] for patch in profile["patches"]}


def test_image_base_torch_and_extras() -> None:
    assert dockerfile_instructions("FROM") == ["python:3.11-slim"]
    torch = DOCKERFILE.index('pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"')
    package = DOCKERFILE.index('".[ray,operator]"')
    assert torch < package, "torch must be installed before the package"
    assert "ARG TORCH_VERSION=2.13.0" in DOCKERFILE
    assert re.search(r"ARG TORCH_INDEX_URL=\S+/whl/cpu\n", DOCKERFILE)


def test_image_runs_as_non_root_with_writable_dirs_under_tmp() -> None:
    (user,) = dockerfile_instructions("USER")
    assert user.split(":")[0] not in {"0", "root"}
    for variable in ("HOME", "XDG_CACHE_HOME", "HF_HOME", "MEMORY_MCP_DATA_DIR"):
        assert re.search(rf"\b{variable}=/tmp/", DOCKERFILE), variable
    assert dockerfile_instructions("ENTRYPOINT") == ['["memory-mcp"]']


def test_image_copies_every_component_folder() -> None:
    copied = {line.split()[0] for line in dockerfile_instructions("COPY")}
    assert component_folders() <= copied
    ignored = {line.strip().lstrip("/") for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()}
    assert not (component_folders() | {"pyproject.toml", "README.md"}) & ignored


def test_skaffold_deploys_the_chart_with_the_built_image() -> None:
    (artifact,) = SKAFFOLD["build"]["artifacts"]
    (release,) = SKAFFOLD["deploy"]["helm"]["releases"]
    assert (REPO_ROOT / release["chartPath"]).resolve() == CHART_DIR
    template_key = re.sub(r"[^A-Za-z0-9]", "_", artifact["image"])
    assert release["setValueTemplates"] == {
        "image.repository": f"{{{{.IMAGE_REPO_{template_key}}}}}",
        "image.tag": f"{{{{.IMAGE_TAG_{template_key}}}}}",
    }


def test_dev_profile_syncs_every_component_folder() -> None:
    rules = dev_profile()["/build/artifacts/0/sync"]["manual"]
    assert {rule["src"].split("/")[0] for rule in rules} == component_folders()
    assert {rule["dest"] for rule in rules} == {"/app"}
    assert dev_profile()["/build/artifacts/0/docker/buildArgs"] == {"INSTALL_MODE": "--editable"}


@pytest.fixture
def dev_manifests(render: Renderer) -> list[dict[str, Any]]:
    set_values = dev_profile()["/deploy/helm/releases/0/setValues"]
    return render(parse_set_string(",".join(f"{key}={value}" for key, value in set_values.items())))


def test_dev_profile_values_render_a_reloading_server(dev_manifests: list[dict[str, Any]]) -> None:
    for manifest in dev_manifests:
        if manifest["kind"] not in {"Cluster", "RayService", "ServiceMonitor", "PrometheusRule"}:
            kubernetes_validate.validate(manifest, KUBE_VERSION, strict=True)
    (server,) = [
        c for d in of_kind(dev_manifests, "Deployment") for c in containers(d) if c["name"] == "server"
    ]
    assert server["command"][0] == "watchfiles"
    assert server["securityContext"]["readOnlyRootFilesystem"] is False
    assert of_kind(dev_manifests, "HorizontalPodAutoscaler") == []
