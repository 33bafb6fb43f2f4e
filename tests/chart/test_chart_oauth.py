"""The chart's OAuth wiring: signing keys in a Secret the server reads, the public URL, the routes."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from memory_mcp.core.settings import Settings
from memory_mcp.store.oauth_keys import SigningKeys
from tests.chart.chart_render import Manifest, Renderer, env_of, one

ON = {"ingress": {"enabled": True, "host": "memory.example.org"}, "oauth": {"redirectHosts": ["claude.ai"]}}


def _server(manifests: list[Manifest]) -> tuple[dict[str, dict[str, str]], dict[str, object]]:
    spec = one(manifests, "Deployment", "-server")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    return env_of(container), spec


async def test_the_server_signs_with_the_key_of_the_charts_secret(
    render: Renderer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifests = render(ON)
    env, spec = _server(manifests)
    secret = one(manifests, "Secret", "-oauth-signing-keys")
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    volume = next(v for v in spec["volumes"] if v["name"] == "oauth-signing-keys")  # type: ignore[attr-defined]
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    # What the pod would see: the Secret's files in the folder the settings name.
    for name, data in secret["data"].items():
        (tmp_path / name).write_bytes(base64.b64decode(data))
    for name in ("MEMORY_MCP_PUBLIC_URL", "MEMORY_MCP_OAUTH_REDIRECT_HOSTS", "MEMORY_MCP_OAUTH_ENABLED"):
        monkeypatch.setenv(name, env[name]["value"])
    monkeypatch.setenv("MEMORY_MCP_OAUTH_SIGNING_KEYS_DIR", str(tmp_path))
    settings = Settings()
    assert env["MEMORY_MCP_OAUTH_SIGNING_KEYS_DIR"]["value"] == "/var/run/memory-mcp/oauth-signing-keys"
    assert settings.public_url == "https://memory.example.org" and settings.oauth_redirect_hosts == [
        "claude.ai"
    ]
    keys = SigningKeys(settings.oauth_signing_keys_dir, overlap_s=3600)
    key = await keys.signing_key(None)  # type: ignore[arg-type]  # files: no database needed
    assert key.public_jwk()["kid"] == key.kid and key.public_jwk()["crv"] == "Ed25519"


def test_an_existing_secret_is_used_and_oauth_can_be_turned_off(render: Renderer) -> None:
    given = render({**ON, "oauth": {"signingKeysSecret": "my-keys"}})
    _, spec = _server(given)
    assert not [
        m for m in given if m["kind"] == "Secret" and m["metadata"]["name"].endswith("-oauth-signing-keys")
    ]
    assert (
        next(v for v in spec["volumes"] if v["name"] == "oauth-signing-keys")["secret"]["secretName"]
        == "my-keys"
    )  # type: ignore[attr-defined]
    off = render({**ON, "oauth": {"enabled": False}})
    env, _ = _server(off)
    assert (
        env["MEMORY_MCP_OAUTH_ENABLED"]["value"] == "false" and "MEMORY_MCP_OAUTH_SIGNING_KEYS_DIR" not in env
    )
    paths = {p["path"] for p in one(off, "Ingress")["spec"]["rules"][0]["http"]["paths"]}
    assert paths == {"/mcp", "/v1"}


def test_an_external_provider_is_passed_on_and_only_the_resource_metadata_is_routed(render: Renderer) -> None:
    issuer = "https://sso.example.org/realms/memory"
    manifests = render({**ON, "oauth": {"issuer": issuer, "userClaim": "preferred_username"}})
    env, _ = _server(manifests)
    assert env["MEMORY_MCP_OAUTH_ISSUER"]["value"] == issuer
    assert env["MEMORY_MCP_OAUTH_USER_CLAIM"]["value"] == "preferred_username"
    assert "MEMORY_MCP_OAUTH_AUDIENCE" not in env  # the server's own /mcp URL
    paths = {p["path"] for p in one(manifests, "Ingress")["spec"]["rules"][0]["http"]["paths"]}
    assert paths == {"/mcp", "/v1", "/.well-known/oauth-protected-resource"}
    audience = render({**ON, "oauth": {"issuer": issuer, "audience": "api://memory"}})
    assert _server(audience)[0]["MEMORY_MCP_OAUTH_AUDIENCE"]["value"] == "api://memory"
    assert "MEMORY_MCP_OAUTH_ISSUER" not in _server(render(ON))[0]
