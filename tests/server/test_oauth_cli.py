"""`memory-mcp oauth clients list|revoke` and `oauth keys rotate` in a real process."""

from __future__ import annotations

import json

import httpx2

from memory_mcp.store import oauth_keys
from memory_mcp.store.access import Access
from memory_mcp.store.audit import list_events
from tests.cli_support import Admin
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer
from tests.server.oauth_flow import Flow

WHO = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoAmI", "arguments": {}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def test_clients_are_listed_and_a_revoked_one_loses_its_tokens_at_once(
    server: RunningServer, db_urls: tuple[str, str]
) -> None:
    await make_space(server.db, "notes")
    key = await make_key(server.db, await make_user(server.db), {"notes": Access.READ}, "notes")
    admin = Admin(db_urls[1])
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        flow = Flow(http)
        await flow.register(client_name="Listed app")
        tokens = await flow.tokens(key)
        listed = json.loads(admin.ok("oauth", "clients", "list", "--json").stdout)
        assert [(c["client_id"], c["name"], c["registered_by"], c["live_grants"]) for c in listed] == [
            (flow.client_id, "Listed app", "registration", 1)
        ]
        assert "revoked OAuth client" in admin.ok("oauth", "clients", "revoke", flow.client_id).stderr
        assert "already revoked" in admin.ok("oauth", "clients", "revoke", flow.client_id).stderr
        assert "no OAuth client" in admin.refused("oauth", "clients", "revoke", "mcl_nobody")
        who = await http.post(
            "/mcp", json=WHO, headers={**MCP_HEADERS, "Authorization": f"Bearer {tokens['access_token']}"}
        )
        assert who.status_code == 401
        assert (await flow.refresh(tokens["refresh_token"])).json()["error"] == "invalid_client"
        page = await http.get("/authorize", params=flow.authorize_params())
        assert page.status_code == 400 and "revoked" in page.text
    actions = {e.action for e in await list_events(server.db)}
    assert {
        "oauth.client_registered",
        "oauth.consent",
        "oauth.token_issued",
        "oauth.client_revoked",
    } <= actions


async def test_rotation_keeps_tokens_of_the_old_key_valid_and_signs_with_the_new(
    server: RunningServer, db_urls: tuple[str, str]
) -> None:
    await make_space(server.db, "notes")
    key = await make_key(server.db, await make_user(server.db), {"notes": Access.READ}, "notes")
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        flow = Flow(http)
        await flow.register()
        before = await flow.tokens(key)
        out = Admin(db_urls[1]).ok("oauth", "keys", "rotate").stderr
        after = (await flow.refresh(before["refresh_token"])).json()
        for token in (before["access_token"], after["access_token"]):
            who = await http.post(
                "/mcp", json=WHO, headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"}
            )
            assert who.status_code == 200
    # A server that reads the keys now (or within a minute) signs with the new one.
    new_kid = out.split("new signing key ")[1].split(";")[0]
    fresh = oauth_keys.SigningKeys(None, overlap_s=3600)
    assert (await fresh.signing_key(server.db)).kid == new_kid
    assert len(await fresh.all_public(server.db)) == 2  # the old one still verifies
