"""Each component is a distribution of its own: its wheel holds its own subpackage of the namespace
``memory_mcp`` and nothing else, the wheels installed together into a fresh virtualenv import as
installed from anywhere, and imports between components point one way.

No folder of the repository root may shadow a package or the standard library: `operator/` must not
hide the standard library's `operator`, `memory_mcp/` must not hide the installed `memory_mcp`. The
fresh virtualenv gets the wheels alone; their dependencies come from the test environment's
site-packages through a `.pth` file, so that nothing is downloaded.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK = (
    "import collections, operator, memory_mcp.operator, memory_mcp.server; operator.itemgetter; print('ok')"
)

# folder -> (distribution, the subpackages of memory_mcp it holds; "" = modules at the top)
COMPONENTS = {
    "memory_mcp": ("memory-mcp-core", {"", "core"}),
    "store": ("memory-mcp-store", {"store"}),
    "embedder": ("memory-mcp-embedder", {"embedder"}),
    "server": ("memory-mcp-server", {"server"}),
    "operator": ("memory-mcp-operator", {"operator"}),
}
# Which subpackages each may import (the command line's top-level modules may import any).
ALLOWED = {
    "store": set(),
    "core": {"store"},
    "embedder": {"core"},
    "server": {"core", "store", "embedder"},
    "operator": {"core", "store"},
}


def pyproject(folder: str) -> dict:
    return tomllib.loads((ROOT / folder / "pyproject.toml").read_text())


def test_workspace_lists_every_component() -> None:
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert set(root["tool"]["uv"]["workspace"]["members"]) == set(COMPONENTS)
    for folder, (name, _) in COMPONENTS.items():
        assert pyproject(folder)["project"]["name"] == name
        assert not (ROOT / folder / "src" / "memory_mcp" / "__init__.py").exists(), "a namespace package"


def imported_subpackages(path: Path) -> set[str]:
    """The memory_mcp subpackages a module imports, lazily inside functions included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "memory_mcp" and len(parts) > 1:
                found.add(parts[1])
    return found


@pytest.mark.parametrize("subpackage", sorted(ALLOWED))
def test_imports_point_one_way(subpackage: str) -> None:
    folder = "memory_mcp" if subpackage == "core" else subpackage
    package = ROOT / folder / "src" / "memory_mcp" / subpackage
    wrong = {
        str(path.relative_to(ROOT)): imported - ALLOWED[subpackage] - {subpackage}
        for path in package.rglob("*.py")
        if (imported := imported_subpackages(path)) - ALLOWED[subpackage] - {subpackage}
    }
    assert not wrong, wrong
    # What a component imports of another, it declares as a dependency.
    declared = {re.split(r"[\s\[<>=@]", d)[0] for d in pyproject(folder)["project"]["dependencies"]}
    needed = {
        COMPONENTS["memory_mcp" if sub == "core" else sub][0]
        for path in package.rglob("*.py")
        for sub in imported_subpackages(path) - {subpackage}
    }
    assert needed <= declared, needed - declared


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            *(str(ROOT / folder) for folder in COMPONENTS),
        ],
        check=True,
        cwd=out,
        capture_output=True,
        text=True,
    )
    built = {}
    for folder, (name, _) in COMPONENTS.items():
        (built[folder],) = out.glob(f"{name.replace('-', '_')}-*.whl")
    return built


def test_each_wheel_holds_its_own_subpackage_only(wheels: dict[str, Path]) -> None:
    for folder, (_, subpackages) in COMPONENTS.items():
        names = [n for n in zipfile.ZipFile(wheels[folder]).namelist() if ".dist-info/" not in n]
        assert names, folder
        assert all(n.startswith("memory_mcp/") for n in names), names
        assert "memory_mcp/__init__.py" not in names
        held = {n.split("/")[1] if n.count("/") > 1 else "" for n in names}
        assert held == subpackages, (folder, held)
    store = set(zipfile.ZipFile(wheels["store"]).namelist())
    versions = ROOT / "store" / "src" / "memory_mcp" / "store" / "migrations" / "versions"
    migrations = sorted(p.name for p in versions.glob("0*.py"))
    assert migrations and all(f"memory_mcp/store/migrations/versions/{m}" in store for m in migrations)
    server = set(zipfile.ZipFile(wheels["server"]).namelist())
    widgets = sorted(
        p.name for p in (ROOT / "server" / "src" / "memory_mcp" / "server" / "widgets").glob("*.html")
    )
    assert len(widgets) == 4 and all(f"memory_mcp/server/widgets/{w}" in server for w in widgets)


@pytest.fixture(scope="module")
def fresh_python(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", *map(str, wheels.values())],
        check=True,
        cwd="/",
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "memory_mcp_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


@pytest.mark.parametrize("cwd", [ROOT, Path("/")], ids=["repository-root", "filesystem-root"])
def test_installed_wheels_import_from_anywhere(fresh_python: Path, cwd: Path) -> None:
    for args in (
        ["-c", CHECK],
        ["-S", "-c", "import collections, operator; operator.itemgetter"],
        ["-m", "pip", "--version"],
    ):
        result = subprocess.run([str(fresh_python), *args], cwd=cwd, capture_output=True, text=True)
        assert result.returncode == 0, (args, result.stderr[-2000:])
    located = subprocess.run(
        [
            str(fresh_python),
            "-c",
            "import memory_mcp.cli, memory_mcp.core, memory_mcp.server, operator; "
            "print(memory_mcp.cli.__file__, memory_mcp.core.__file__, memory_mcp.server.__file__); "
            "print(operator.__file__)",
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    # From the repository root, the root's `memory_mcp/` folder is one more portion of the namespace,
    # with nothing in it to import: every module still comes from the installed wheels.
    assert all(str(ROOT) not in path for path in located), located
    version = subprocess.run(
        [str(fresh_python), "-m", "memory_mcp.cli", "--version"], cwd=cwd, capture_output=True, text=True
    )
    assert version.stdout.strip() == f"memory-mcp {pyproject('memory_mcp')['project']['version']}", version


def test_development_install_resolves_the_standard_library_from_the_root() -> None:
    # The test environment's own editable install, run from the repository root.
    for args in (
        ["-S", "-c", "import collections, operator; operator.itemgetter"],
        ["-c", CHECK],
        ["-m", "pip", "--version"],
    ):
        result = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True)
        assert result.returncode == 0, (args, result.stderr[-2000:])
    # Every component resolves to its own folder's src/, with no link tree in between.
    for folder, (_, subpackages) in COMPONENTS.items():
        for sub in subpackages - {""}:
            where = subprocess.run(
                [sys.executable, "-c", f"import memory_mcp.{sub} as m; print(m.__file__)"],
                cwd="/",
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            assert Path(where).is_relative_to(ROOT / folder / "src"), (sub, where)
