"""The built wheel, installed into a fresh virtualenv, imports as installed from anywhere.

No folder of the repository root may shadow the package or the standard library: `operator/`
must not hide the standard library's `operator`, `memory_mcp/` must not hide the installed
`memory_mcp`. The fresh virtualenv gets the wheel alone; its dependencies come from the test
environment's site-packages through a `.pth` file, so that nothing is downloaded.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK = (
    "import collections, operator, memory_mcp.operator, memory_mcp.server; operator.itemgetter; print('ok')"
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-v",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        cwd=out,
        capture_output=True,
        text=True,
    )
    # setuptools warns of a folder of files it has to guess about (the migrations' versions once).
    assert "is absent from the `packages` configuration" not in done.stdout + done.stderr
    (built,) = out.glob("memory_mcp-*.whl")
    return built


@pytest.fixture(scope="module")
def fresh_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, cwd="/")
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "memory_mcp_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def test_wheel_holds_every_package_and_the_migrations(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in (
        "memory_mcp",
        "memory_mcp/core",
        "memory_mcp/store",
        "memory_mcp/server",
        "memory_mcp/embedder",
        "memory_mcp/operator",
        "memory_mcp/store/migrations",
        "memory_mcp/store/migrations/versions",
    ):
        assert f"{package}/__init__.py" in names, package
    migrations = sorted(p.name for p in (ROOT / "store" / "src" / "migrations" / "versions").glob("0*.py"))
    assert migrations and all(f"memory_mcp/store/migrations/versions/{m}" in names for m in migrations)
    widgets = sorted(p.name for p in (ROOT / "server" / "src" / "widgets").glob("*.html"))
    assert len(widgets) == 4 and all(f"memory_mcp/server/widgets/{w}" in names for w in widgets)
    assert not any(name.startswith(("operator/", "store/", "server/", "src/")) for name in names)


@pytest.mark.parametrize("cwd", [ROOT, Path("/")], ids=["repository-root", "filesystem-root"])
def test_installed_wheel_imports_from_anywhere(fresh_python: Path, cwd: Path) -> None:
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
            "import memory_mcp, operator; print(memory_mcp.__file__); print(operator.__file__)",
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert all(str(ROOT) not in path for path in located), located


def test_development_install_resolves_the_standard_library_from_the_root() -> None:
    # The test environment's own (strict editable) install, run from the repository root.
    for args in (
        ["-S", "-c", "import collections, operator; operator.itemgetter"],
        ["-c", CHECK],
        ["-m", "pip", "--version"],
    ):
        result = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True)
        assert result.returncode == 0, (args, result.stderr[-2000:])
