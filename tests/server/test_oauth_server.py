"""The built-in authorization server through HTTP: registration, sign-in with a key, consent,
tokens, refresh rotation, revocation, and every refusal the RFCs name."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

from memory_mcp.store.access import Access
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer
from tests.server.oauth_flow import REDIRECT, Flow, query_of

TOOLS_LIST = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "whoAmI", "arguments": {}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
async def flow(server: RunningServer) -> AsyncIterator[Flow]:
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        flow = Flow(http)
        await flow.register()
        yield flow


async def _person(server: RunningServer, name: str = "") -> tuple[str, str]:
    """A Writer with a key on two spaces: (user name, key)."""
    await make_space(server.db, "notes")
    await make_space(server.db, "team")
    user = await make_user(server.db, name or None)
    key = await make_key(
        server.db, user, {"notes": Access.READ_WRITE, "team": Access.READ}, "notes", name=f"{user}-key"
    )
    return user, key


async def _who(http: httpx2.AsyncClient, token: str) -> httpx2.Response:
    return await http.post(
        "/mcp", json=TOOLS_LIST, headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"}
    )


async def test_a_token_acts_for_its_key_on_the_spaces_kept_and_refreshes_with_rotation(
    server: RunningServer, flow: Flow
) -> None:
    _, key = await _person(server)
    consent = await flow.sign_in(key)
    assert consent.status_code == 200
    assert 'name="space" value="notes" checked' in consent.text and "ReadWrite" in consent.text
    assert 'name="space" value="team" checked' in consent.text
    assert "Allow" in consent.text and "Deny" in consent.text and "127.0.0.1:9" in consent.text
    allowed = await flow.consent(consent, ["team"])
    assert allowed.status_code == 303
    answer = query_of(allowed.headers["location"])
    assert allowed.headers["location"].startswith(REDIRECT + "?")
    assert answer["iss"] == f"{server.base}/" and answer["state"].startswith("st-")
    exchanged = await flow.exchange(answer["code"])
    assert exchanged.status_code == 200, exchanged.text
    tokens: dict[str, Any] = exchanged.json()
    assert (
        tokens["token_type"] == "Bearer"
        and tokens["expires_in"] == 3600
        and exchanged.headers["cache-control"] == "no-store"
    )
    me = await _who(flow.http, tokens["access_token"])
    assert me.status_code == 200, me.text
    grants = me.json()["result"]["structuredContent"]["grants"]
    assert [g["space"] for g in grants] == ["team"]
    # REST takes the same token.
    spaces = await flow.http.get("/v1/spaces", headers={"Authorization": f"Bearer {tokens['access_token']}"})
    assert spaces.status_code == 200 and [s["key"] for s in spaces.json()["spaces"]] == ["team"]

    rotated = await flow.refresh(tokens["refresh_token"])
    assert rotated.status_code == 200, rotated.text
    fresh = rotated.json()
    assert fresh["refresh_token"] != tokens["refresh_token"]
    assert (await _who(flow.http, fresh["access_token"])).status_code == 200
    # The spent refresh token again: a leak. The whole family goes, the fresh tokens included.
    reused = await flow.refresh(tokens["refresh_token"])
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
    assert (await _who(flow.http, fresh["access_token"])).status_code == 401
    assert (await flow.refresh(fresh["refresh_token"])).json()["error"] == "invalid_grant"
