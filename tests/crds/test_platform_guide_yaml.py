"""Every Memory-MCP object in docs/platform.md's YAML blocks passes the CRD schemas and `apply`."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from memory_mcp.apply import load_manifests
from tests.crds.crd_schema import load_crds, validation_errors

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "platform.md"
KINDS = {"Space", "User", "ApiKey"}


def guide_objects() -> list[dict[str, object]]:
    blocks = re.findall(r"```yaml\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    objects = []
    for block in blocks:
        try:
            documents = list(yaml.safe_load_all(block))
        except yaml.YAMLError:
            continue  # a fragment (a kustomization patch, a values excerpt), not an object
        objects += [d for d in documents if isinstance(d, dict) and d.get("kind") in KINDS]
    return objects


def test_the_guides_objects_pass_the_crds_and_apply() -> None:
    objects = guide_objects()
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}  # type: ignore[index]
    # The governance sections' examples are among them.
    assert {("Space", "policies"), ("Space", "handbook"), ("ApiKey", "policy-agent")} <= kinds
    crds = load_crds()
    for manifest in objects:
        assert validation_errors(crds[str(manifest["kind"])], manifest) == [], manifest["metadata"]
        assert len(load_manifests(yaml.safe_dump(manifest), "docs/platform.md")) == 1
