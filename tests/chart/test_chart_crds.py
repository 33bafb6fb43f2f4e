"""The chart installs the CRDs from the repository's crds/ folder: one source, no copies."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import yaml
from helm_python.chart import Chart, package

from tests.chart.chart_render import CHART_DIR, REPO_ROOT

CRD_SOURCE = REPO_ROOT / "crds"


def test_chart_crds_folder_is_a_relative_link_to_the_source() -> None:
    link = CHART_DIR / "crds"
    assert link.is_symlink()
    assert os.readlink(link) == "../../crds"
    assert link.resolve() == CRD_SOURCE.resolve()


def test_loaded_chart_carries_exactly_the_source_crds(chart: Chart) -> None:
    loaded = {Path(crd["name"]).name: crd["data"] for crd in chart.crds}
    source = {path.name: path.read_text() for path in CRD_SOURCE.glob("*.yaml")}
    assert loaded == source
    names = {yaml.safe_load(data)["metadata"]["name"] for data in loaded.values()}
    assert names == {"spaces.memory-mcp.io", "users.memory-mcp.io", "apikeys.memory-mcp.io"}


def test_packaged_chart_contains_the_crd_files(tmp_path: Path) -> None:
    archive = package(CHART_DIR, destination=tmp_path)
    with tarfile.open(archive) as tar:
        packaged = {
            Path(member.name).name: tar.extractfile(member).read().decode()  # type: ignore[union-attr]
            for member in tar.getmembers()
            if member.name.startswith("memory-mcp/crds/")
        }
    assert packaged == {path.name: path.read_text() for path in CRD_SOURCE.glob("*.yaml")}
