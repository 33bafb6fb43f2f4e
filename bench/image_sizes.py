"""What each image of the Dockerfile installs, and how big it is.

Builds no image: for each target (server, operator, embedder) it runs that target's `pip install`
lines, read from the Dockerfile itself, in a fresh virtualenv, then measures its site-packages
(`du`) and every installed distribution (the files its RECORD lists). The Debian packages a target
adds with apt-get are listed with the Installed-Size apt-cache reports for each (their own size,
without the libraries they pull in). The base image (python:3.11-slim) comes on top of both.

    python bench/image_sizes.py                  # all three targets
    python bench/image_sizes.py operator --top 5
    python bench/image_sizes.py --torch-index-url https://download.pytorch.org/whl/cpu

Without --torch-index-url torch comes from pip's configured indexes (pin: the Dockerfile's
TORCH_VERSION). Each target takes minutes: pip resolves and unpacks everything, torch included.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = REPO_ROOT / "Dockerfile"
TARGETS = ("server", "operator", "embedder")
# Distributions whose presence decides what an image is for.
MARKERS = ("torch", "ray", "kopf", "pypdf", "faster-whisper", "sentence-transformers", "fastapi", "mcp")

# Run inside the target's virtualenv: every distribution with the bytes of the files it installed.
LIST_DISTRIBUTIONS = """
import importlib.metadata as md, json, os
rows = []
for dist in md.distributions():
    size = 0
    for file in dist.files or ():
        path = dist.locate_file(file)
        if os.path.isfile(path):
            size += os.path.getsize(path)
    rows.append({"name": dist.metadata["Name"], "version": dist.version, "bytes": size})
print(json.dumps(rows))
"""


@dataclass
class Stage:
    name: str
    parent: str
    instructions: list[str] = field(default_factory=list)


def parse_dockerfile(text: str) -> tuple[dict[str, str], dict[str, Stage]]:
    """The global ARG defaults and the stages, each with its instructions (continuations joined)."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for line in lines:
        keyword, _, rest = line.partition(" ")
        if keyword == "FROM":
            image, _, name = re.split(r"\s+", rest, maxsplit=2)
            current = stages[name] = Stage(name, image)
        elif current is None:
            if keyword == "ARG" and "=" in rest:
                key, _, value = rest.partition("=")
                args[key] = value.strip('"')
        else:
            current.instructions.append(line)
    return args, stages


def chain(stages: dict[str, Stage], target: str) -> list[Stage]:
    """The stages a target is built from, the first one first."""
    found: list[Stage] = []
    name = target
    while name in stages:
        found.insert(0, stages[name])
        name = stages[name].parent
    return found


def run_commands(stages: dict[str, Stage], target: str, prefix: str) -> list[str]:
    """The commands of the target's RUN instructions that start with `prefix`, split on `&&` and `;`.

    Of an `if ...; then A; else B; fi`, only B: the default branch (the torch install from the
    PyTorch index; A reads a folder of wheels given as a build argument)."""
    found = []
    for stage in chain(stages, target):
        for instruction in stage.instructions:
            if instruction.startswith("RUN "):
                for command in re.split(r"&&|;", re.sub(r"if .*?;\s*then .*?;\s*else", "", instruction[4:])):
                    if command.strip().startswith(prefix):
                        found.append(command.strip())
    return found


def pip_arguments(command: str, args: dict[str, str], torch_index_url: str | None) -> list[str]:
    """A Dockerfile `pip install ...` as arguments for the virtualenv's pip, build arguments filled in."""
    values = {**args, "INSTALL_MODE": ""}
    expanded = re.sub(r"\$\{(\w+)\}", lambda m: values.get(m.group(1), ""), command)
    words = shlex.split(expanded)[2:]
    if "--index-url" in words:
        at = words.index("--index-url")
        if torch_index_url:
            words[at + 1] = torch_index_url
        else:
            del words[at : at + 2]
    return [word for word in words if word]


def apt_packages(stages: dict[str, Stage], target: str) -> list[str]:
    packages = []
    for command in run_commands(stages, target, "apt-get install"):
        packages += [word for word in command.split()[2:] if not word.startswith("-")]
    return packages


def apt_installed_kib(package: str) -> int | None:
    try:
        shown = subprocess.run(
            ["apt-cache", "show", "--no-all-versions", package], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    match = re.search(r"^Installed-Size: (\d+)$", shown, re.MULTILINE)
    return int(match.group(1)) if match else None


def site_packages(venv: Path) -> Path:
    (found,) = venv.glob("lib/python*/site-packages")
    return found


def measure(target: str, work: Path, torch_index_url: str | None) -> dict[str, object]:
    args, stages = parse_dockerfile(DOCKERFILE.read_text())
    venv = work / target
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    # The venv's own pip and setuptools are the base image's too: measure what the image adds.
    baseline = json.loads(subprocess.check_output([python, "-c", LIST_DISTRIBUTIONS]))
    started = time.monotonic()
    for command in run_commands(stages, target, "pip install"):
        arguments = pip_arguments(command, args, torch_index_url)
        print(f"[{target}] pip install {' '.join(arguments)}", file=sys.stderr)
        subprocess.run([python, "-m", "pip", "install", "--quiet", *arguments], cwd=REPO_ROOT, check=True)
    seconds = time.monotonic() - started
    base_names = {row["name"] for row in baseline}
    installed = json.loads(subprocess.check_output([python, "-c", LIST_DISTRIBUTIONS]))
    added = sorted(
        (row for row in installed if row["name"] not in base_names), key=lambda row: -int(row["bytes"])
    )
    du = subprocess.check_output(["du", "-sk", str(site_packages(venv))], text=True)
    names = {str(row["name"]).lower().replace("_", "-") for row in installed}
    return {
        "target": target,
        "site_packages_kib": int(du.split()[0]),
        "added_bytes": sum(int(row["bytes"]) for row in added),
        "distributions": added,
        "has": {marker: marker in names for marker in MARKERS},
        "apt": {package: apt_installed_kib(package) for package in apt_packages(stages, target)},
        "install_seconds": round(seconds),
    }


def mib(count: float) -> str:
    return f"{count / 2**20:,.0f} MiB"


def report(result: dict[str, object], top: int) -> None:
    """Print one target's figures (at once, so that a long run shows each as it is done)."""
    distributions = result["distributions"]
    assert isinstance(distributions, list)
    print(f"\n== {result['target']}")
    print(f"site-packages (du): {mib(int(str(result['site_packages_kib'])) * 1024)}")
    print(
        f"added by the image's pip installs: {mib(int(str(result['added_bytes'])))} in {len(distributions)} distributions"
    )
    has = result["has"]
    assert isinstance(has, dict)
    print("contains: " + ", ".join(f"{name} {'yes' if present else 'no'}" for name, present in has.items()))
    apt = result["apt"]
    assert isinstance(apt, dict)
    if apt:
        print(
            "apt packages (own Installed-Size): "
            + ", ".join(
                f"{name} {f'{kib / 1024:.1f} MiB' if kib is not None else '?'}" for name, kib in apt.items()
            )
        )
    print(f"largest {min(top, len(distributions))}:")
    for row in distributions[:top]:
        print(f"  {row['name']:<32} {row['version']:<16} {mib(int(row['bytes'])):>10}")
    print(f"pip install took {result['install_seconds']} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("targets", nargs="*", help=f"any of {', '.join(TARGETS)} (default: all)")
    parser.add_argument("--top", type=int, default=12, help="largest distributions listed per image")
    parser.add_argument("--work", type=Path, help="keep the virtualenvs here (default: a temporary dir)")
    parser.add_argument(
        "--torch-index-url", help="the index torch comes from (default: pip's configured ones)"
    )
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    options = parser.parse_args()
    unknown = set(options.targets) - set(TARGETS)
    if unknown:
        parser.error(f"unknown target(s): {', '.join(sorted(unknown))}")
    results = []
    with tempfile.TemporaryDirectory(prefix="image-sizes-") as temporary:
        for target in options.targets or TARGETS:
            results.append(measure(target, options.work or Path(temporary), options.torch_index_url))
            report(results[-1], options.top)
    if options.json:
        options.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
