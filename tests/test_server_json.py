"""``server.json``, the MCP Registry's entry, says what this checkout is: the package's version,
the name the README proves for PyPI, the icons the server serves, and the shape the Registry's
published schema (2025-12-11) and its publishing rules ask for."""

from __future__ import annotations

import json
import re
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

from memory_mcp.server import brand

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
# The schema's name pattern, and the namespace GitHub sign-in lets a publisher use.
NAME = re.compile(r"[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+")
GITHUB_NAMESPACE = re.compile(r"io\.github\.([A-Za-z0-9-]+)/[a-z0-9._-]+")
# What the Registry refuses as a version: ranges, wildcards, "latest".
NOT_A_VERSION = re.compile(r"latest|[\^~<>=*|, ]|\.x\b|\.X\b")
SERVER_FIELDS = {"$schema", "name", "title", "description", "version", "websiteUrl", "repository", "icons"}
PACKAGE_FIELDS = {
    "registryType",
    "registryBaseUrl",
    "identifier",
    "version",
    "fileSha256",
    "runtimeHint",
    "transport",
    "runtimeArguments",
    "packageArguments",
    "environmentVariables",
}
INPUT_FIELDS = {
    "name",
    "description",
    "isRequired",
    "format",
    "value",
    "isSecret",
    "default",
    "placeholder",
    "choices",
    "variables",
}


def _entry() -> dict[str, Any]:
    entry: dict[str, Any] = json.loads((ROOT / "server.json").read_text())
    return entry


def _check_input(item: dict[str, Any], where: str) -> None:
    assert set(item) <= INPUT_FIELDS | {"type", "valueHint", "isRepeated"}, where
    for name, variable in item.get("variables", {}).items():
        assert set(variable) <= INPUT_FIELDS - {"name", "variables"}, f"{where}.variables.{name}"
        assert "{" + name + "}" in item["value"], f"{where}: {{{name}}} is not in its value"


def _check_transport(transport: dict[str, Any], where: str) -> None:
    assert transport["type"] == "streamable-http", where
    variables = set(transport.get("variables", {}))
    assert set(re.findall(r"\{(\w+)\}", transport["url"])) == variables, where
    assert re.match(r"https?://", transport["url"]) and transport["url"].endswith("/mcp"), where
    (header,) = transport["headers"]
    _check_input(header, f"{where}.headers[0]")
    assert header["name"] == "Authorization" and header["isSecret"] is True
    assert header["value"].startswith("Bearer {")


def test_server_json_has_the_registrys_shape_and_this_checkouts_version_and_names() -> None:
    entry = _entry()
    package_version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert package_version == version("memory-mcp")
    assert entry["$schema"] == SCHEMA
    assert set(entry) <= SERVER_FIELDS | {"packages", "remotes"}
    assert NAME.fullmatch(entry["name"]) and 3 <= len(entry["name"]) <= 200
    owner = GITHUB_NAMESPACE.fullmatch(entry["name"])
    assert owner is not None, entry["name"]
    assert entry["repository"] == {
        "url": f"https://github.com/{owner.group(1)}/memory-mcp",
        "source": "github",
    }
    assert entry["websiteUrl"] == brand.WEBSITE_URL
    assert entry["title"] == brand.TITLE
    assert 1 <= len(entry["description"]) <= 100
    assert entry["version"] == package_version and not NOT_A_VERSION.search(entry["version"])

    (package,) = entry["packages"]
    assert set(package) <= PACKAGE_FIELDS
    assert (package["registryType"], package["identifier"]) == ("pypi", "memory-mcp")
    assert package["version"] == package_version
    assert package["packageArguments"] == [{"type": "positional", "value": "serve"}]
    _check_transport(package["transport"], "packages[0].transport")
    assert package["transport"]["url"] == "http://127.0.0.1:8765/mcp"  # serve's defaults
    # The Registry verifies a PyPI package by this line in its README (the package's long description).
    assert f"mcp-name: {entry['name']}" in (ROOT / "README.md").read_text()

    (remote,) = entry["remotes"]
    _check_transport(remote, "remotes[0]")
    assert remote["url"].startswith("https://")
    assert remote["headers"][0]["isRequired"] is False  # OAuth hosts sign in instead

    # The icons are the files the server serves at /icons/, as published in the repository.
    for icon in entry["icons"]:
        file = icon["src"].rsplit("/", 1)[1]
        assert icon["src"].endswith(f"/server/src/memory_mcp/server/static/icons/{file}")
        assert icon["src"].startswith(f"https://raw.githubusercontent.com/{owner.group(1)}/memory-mcp/")
        assert brand.icon_bytes(file)
        served = {(i.mime_type, i.theme, tuple(i.sizes or ())) for i in brand.icons("https://x")}
        assert (icon["mimeType"], icon["theme"], tuple(icon["sizes"])) in served
    assert len(entry["icons"]) == len(brand.icons("https://x"))
