"""The images and the skaffold loop agree with the package layout and with the chart.

One multi-stage Dockerfile builds an image per component; each workload of the chart runs its own,
and each image holds only what its component needs (read from the components' declared
dependencies, so a new dependency that drags torch into the operator fails here).
"""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helm_python import parse_set_string
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.chart.chart_render import (
    CHART_DIR,
    KUBE_VERSION,
    REPO_ROOT,
    Renderer,
    containers,
    of_kind,
    one,
    pod_specs,
)

DOCKERFILE = (REPO_ROOT / "Dockerfile").read_text()
SKAFFOLD = yaml.safe_load((REPO_ROOT / "skaffold.yaml").read_text())
CHART = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())

# What each image installs: component folder -> extras.
IMAGES: dict[str, dict[str, set[str]]] = {
    "server": {"memory_mcp": {"tracing"}, "store": {"documents"}, "embedder": set(), "server": set()},
    "operator": {"memory_mcp": set(), "store": set(), "operator": set()},
    "embedder": {"memory_mcp": set(), "store": set(), "embedder": {"ray"}},
}
# What each image must not hold, whichever dependency would bring it.
LEFT_OUT = {
    "server": {"kopf", "kubernetes", "ray"},
    "operator": {
        "torch",
        "ray",
        "sentence-transformers",
        "pypdf",
        "faster-whisper",
        "fastapi",
        "mcp",
        "opentelemetry-instrumentation-fastapi",
    },
    "embedder": {"kopf", "pypdf", "faster-whisper", "mcp"},
}
# The chart's workloads and the values key of the image each runs.
WORKLOAD_IMAGES = {
    ("Deployment", "server"): "server",
    ("Job", "migrate"): "server",
    ("Deployment", "operator"): "operator",
    ("RayService", "ray-head"): "embedder",
    ("RayService", "ray-worker"): "embedder",
}


@dataclass
class Stage:
    name: str
    parent: str
    instructions: list[tuple[str, str]] = field(default_factory=list)


def dockerfile_stages() -> dict[str, Stage]:
    """The Dockerfile's stages by name, each with its instructions (continuation lines joined)."""
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for line in re.sub(r"\\\n\s*", " ", DOCKERFILE).splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        if keyword == "FROM":
            parent, as_, name = rest.split()
            assert as_ == "AS", line
            current = stages[name] = Stage(name, parent)
        elif current is not None:
            current.instructions.append((keyword, rest.strip()))
    return stages


STAGES = dockerfile_stages()


def chain(target: str) -> list[Stage]:
    """The stages a target is built from, its base first."""
    found: list[Stage] = []
    name = target
    while name in STAGES:
        found.insert(0, STAGES[name])
        name = STAGES[name].parent
    return found


def instructions(target: str, keyword: str) -> list[str]:
    return [rest for stage in chain(target) for kind, rest in stage.instructions if kind == keyword]


def run_commands(target: str) -> list[str]:
    """Each simple command of the target's RUN lines (split at `&&` and `;`, `then`/`else` dropped)."""
    commands = []
    for run in instructions(target, "RUN"):
        for command in re.split(r"&&|;", run):
            command = re.sub(r"^(then|else)\s+", "", command.strip())
            if command:
                commands.append(command)
    return commands


def pip_installs(target: str) -> list[list[str]]:
    """The arguments of every `pip install` the target runs, without the editable switch."""
    return [
        [word for word in shlex.split(command)[2:] if word != "${INSTALL_MODE}"]
        for command in run_commands(target)
        if command.startswith("pip install")
    ]


def component_folders() -> set[str]:
    """The workspace's members: the folders that are distributions (memory_mcp, store, server, ...)."""
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    return set(pyproject["tool"]["uv"]["workspace"]["members"])


def installed_components(target: str) -> dict[str, set[str]]:
    """The component folders the target's pip installs name, with their extras."""
    found: dict[str, set[str]] = {}
    for words in pip_installs(target):
        for word in words:
            match = re.fullmatch(r"\./(\w+)(?:\[([\w,]+)\])?", word)
            if match:
                extras = set(filter(None, (match.group(2) or "").split(",")))
                found.setdefault(match.group(1), set()).update(extras)
    return found


@pytest.mark.parametrize("target", sorted(IMAGES))
def test_a_folder_with_extras_is_installed_plain_too(target: str) -> None:
    """pip matches another component's plain requirement (memory-mcp-core needs memory-mcp-store)
    only to a plain folder: `./store[documents]` alone fails to resolve."""
    for words in pip_installs(target):
        for folder in {word.split("[")[0] for word in words if word.startswith("./") and "[" in word}:
            assert folder in words, (target, folder)


def requirements_closure(components: dict[str, set[str]]) -> set[str]:
    """Every distribution the components need: their pyproject.toml files (the checkout's), then
    the installed metadata of what they depend on, extras and markers evaluated."""
    ours: dict[str, tuple[list[str], dict[str, list[str]]]] = {}
    folder_names: dict[str, str] = {}
    for folder in component_folders():
        project = tomllib.loads((REPO_ROOT / folder / "pyproject.toml").read_text())["project"]
        folder_names[folder] = canonicalize_name(project["name"])
        ours[folder_names[folder]] = (
            project.get("dependencies", []),
            project.get("optional-dependencies", {}),
        )
    seen: set[str] = set()
    pending = [(folder_names[folder], extras) for folder, extras in components.items()]
    while pending:
        name, extras = pending.pop()
        key = f"{name}[{','.join(sorted(extras))}]"
        if key in seen:
            continue
        seen.add(key)
        if name in ours:
            requires, optional = ours[name]
            lines = requires + [line for extra in extras for line in optional.get(extra, [])]
            requirements = [Requirement(line) for line in lines]
        else:
            requirements = [
                requirement
                for requirement in map(Requirement, importlib.metadata.requires(name) or [])
                if requirement.marker is None
                or any(requirement.marker.evaluate({"extra": extra}) for extra in extras | {""})
            ]
        pending += [(canonicalize_name(r.name), set(r.extras)) for r in requirements]
    return {key.split("[")[0] for key in seen}


def test_every_image_is_a_target_of_one_dockerfile() -> None:
    external = {stage.parent for stage in STAGES.values() if stage.parent not in STAGES}
    assert external == {"${BASE_IMAGE}"}
    # The registry's image by default; scripts/base-image makes a stand-in where none is reachable.
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim$", DOCKERFILE, re.MULTILINE)
    assert set(IMAGES) <= set(STAGES)
    for target in IMAGES:
        assert chain(target)[0].name == "base"


@pytest.mark.parametrize("target", sorted(IMAGES))
def test_image_installs_its_components_only(target: str) -> None:
    assert installed_components(target) == IMAGES[target]
    copied = {rest.split()[0] for rest in instructions(target, "COPY")}
    assert copied == set(IMAGES[target]), "an image copies the folders it installs, no more"


@pytest.mark.parametrize("target", sorted(IMAGES))
def test_image_leaves_out_what_its_component_does_not_need(target: str) -> None:
    closure = requirements_closure(IMAGES[target])
    assert canonicalize_name("memory-mcp-core") in closure
    assert closure & LEFT_OUT[target] == set()
    # The build checks the same on the installed image, from the modules' side.
    (check,) = [command for command in run_commands(target) if "find_spec" in command]
    match = re.search(r"find_spec\(m\) for m in \(([^)]*)\)", check)
    assert match, check
    checked = {name.strip(" '") for name in match.group(1).split(",")} - {""}
    assert checked and checked <= LEFT_OUT[target]


def test_torch_comes_from_the_cpu_index_before_the_components() -> None:
    assert "ARG TORCH_VERSION=2.13.0" in DOCKERFILE
    assert re.search(r"ARG TORCH_INDEX_URL=\S+/whl/cpu\n", DOCKERFILE)
    torch_install = ["--index-url", "${TORCH_INDEX_URL}", "torch==${TORCH_VERSION}"]
    # Or from a folder of wheels mounted into the build (TORCH_FIND_LINKS), for a machine without
    # the PyTorch index: one of the two, never both.
    torch_from_folder = ["--find-links", "${TORCH_FIND_LINKS}", "torch==${TORCH_VERSION}"]
    for target in IMAGES:
        installs = pip_installs(target)
        needs_torch = "torch" in requirements_closure(IMAGES[target])
        assert (torch_install in installs) == needs_torch, target
        assert (torch_from_folder in installs) == needs_torch, target
        if needs_torch:
            assert installs[:2] == [torch_from_folder, torch_install], "torch before the components"


@pytest.mark.parametrize("target", sorted(IMAGES))
def test_image_runs_as_non_root_with_writable_dirs_under_tmp(target: str) -> None:
    user = instructions(target, "USER")[-1]
    assert user.split(":")[0] not in {"0", "root"}
    environment = " ".join(instructions(target, "ENV"))
    for variable in ("HOME", "XDG_CACHE_HOME", "MEMORY_MCP_DATA_DIR"):
        assert re.search(rf"\b{variable}=/tmp/", environment), variable
    if "embedder" in IMAGES[target]:
        assert re.search(r"\bHF_HOME=/tmp/", environment)
    assert instructions(target, "ENTRYPOINT")[-1] == '["memory-mcp"]'
    # The switch to the unprivileged user comes after every step that installs or writes.
    keywords = [kind for kind, _ in STAGES[target].instructions]
    assert len(keywords) - keywords[::-1].index("USER") > len(keywords) - keywords[::-1].index("RUN")


def test_docker_context_keeps_every_component_folder() -> None:
    ignored = {line.strip().lstrip("/") for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()}
    assert not component_folders() & ignored


def test_skaffold_builds_an_artifact_per_target() -> None:
    artifacts = SKAFFOLD["build"]["artifacts"]
    assert {artifact["docker"]["target"] for artifact in artifacts} == set(IMAGES)
    for artifact in artifacts:
        assert artifact["image"] == f"memory-mcp-{artifact['docker']['target']}"
        assert artifact["docker"]["dockerfile"] == "Dockerfile"


def skaffold_values(release: dict[str, Any]) -> dict[str, Any]:
    """The release's setValueTemplates as skaffold fills them in for artifacts named <image>:<tag>."""
    values: dict[str, Any] = {}
    for key, template in release["setValueTemplates"].items():
        match = re.fullmatch(r"\{\{\.IMAGE_(REPO|TAG)_(\w+)\}\}", template)
        assert match, template
        (artifact,) = [
            a for a in SKAFFOLD["build"]["artifacts"] if re.sub(r"\W", "_", a["image"]) == match.group(2)
        ]
        filled = f"registry.test/{artifact['image']}" if match.group(1) == "REPO" else "sha-1"
        node = values
        *parents, leaf = key.split(".")
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = filled
    return values


def workload_images(manifests: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    images: dict[tuple[str, str], str] = {}
    for manifest in manifests:
        for spec in pod_specs(manifest):
            for container in spec["containers"]:
                images[(manifest["kind"], container["name"])] = container["image"]
    return images


def test_skaffold_sets_each_workload_to_its_own_image(render: Renderer) -> None:
    (release,) = SKAFFOLD["deploy"]["helm"]["releases"]
    assert (REPO_ROOT / release["chartPath"]).resolve() == CHART_DIR
    values = skaffold_values(release)
    values["embedder"]["enabled"] = True
    images = workload_images(render(values))
    assert images == {
        workload: f"registry.test/memory-mcp-{image}:sha-1" for workload, image in WORKLOAD_IMAGES.items()
    }


def test_chart_images_default_to_the_app_version_and_share_a_tag(render: Renderer) -> None:
    version = CHART["appVersion"]
    images = workload_images(render({"embedder": {"enabled": True}}))
    assert images == {
        workload: f"memory-mcp-{image}:{version}" for workload, image in WORKLOAD_IMAGES.items()
    }
    tagged = workload_images(
        render({"image": {"tag": "v9"}, "embedder": {"enabled": True, "image": {"tag": "cuda"}}})
    )
    assert {workload: image.split(":")[1] for workload, image in tagged.items()} == {
        workload: "cuda" if image == "embedder" else "v9" for workload, image in WORKLOAD_IMAGES.items()
    }


def dev_profile() -> dict[str, Any]:
    (profile,) = [p for p in SKAFFOLD["profiles"] if p["name"] == "dev"]
    return {patch["path"]: patch["value"] for patch in profile["patches"]}


def test_dev_profile_installs_editable_and_syncs_what_each_image_holds() -> None:
    for index, artifact in enumerate(SKAFFOLD["build"]["artifacts"]):
        assert dev_profile()[f"/build/artifacts/{index}/docker/buildArgs"] == {"INSTALL_MODE": "--editable"}
        rules = dev_profile()[f"/build/artifacts/{index}/sync"]["manual"]
        assert {rule["src"] for rule in rules} == {
            f"{folder}/**/*" for folder in IMAGES[artifact["docker"]["target"]]
        }
        assert {rule["dest"] for rule in rules} == {"/app"}
    # The editable switch reaches every component install of every image.
    for target in IMAGES:
        for command in run_commands(target):
            if command.startswith("pip install") and "torch==" not in command:
                words = shlex.split(command)[2:]
                assert all(
                    words[at - 1] == "${INSTALL_MODE}"
                    for at, word in enumerate(words)
                    if word.startswith("./")
                ), command


def test_every_stage_declares_the_build_arguments_it_uses() -> None:
    """A global ARG is out of scope inside a stage until the stage names it again; unnamed, it
    expands to nothing (the editable switch silently lost, torch's version check always failing)."""
    for stage in STAGES.values():
        declared = {rest.split("=")[0] for kind, rest in stage.instructions if kind == "ARG"}
        used = {
            name
            for kind, rest in stage.instructions
            if kind == "RUN"
            for name in re.findall(r"\$\{(\w+)\}", rest)
        }
        assert used <= declared, stage.name


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
    # watchfiles restarts the processes: every image that reloads has it through uvicorn[standard].
    assert "watchfiles" in requirements_closure(IMAGES["operator"])
    assert (
        one(dev_manifests, "Deployment", "-operator")["spec"]["template"]["spec"]["containers"][0]["command"][
            0
        ]
        == "watchfiles"
    )
