"""The built-in authorization server through HTTP: registration, sign-in with a key, consent,
tokens, refresh rotation, revocation, and every refusal the RFCs name."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import text

from memory_mcp.embedder.client import Embedder
from memory_mcp.store import apikeys, users
from memory_mcp.store.access import Access, Role
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer, run_server
from tests.server.oauth_flow import REDIRECT, Flow, hidden_fields, query_of

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


async def test_an_unknown_client_or_a_foreign_redirect_gets_a_page_never_a_redirect(
    server: RunningServer, flow: Flow
) -> None:
    for overrides in (
        {"client_id": "mcl_nobody"},
        {"redirect_uri": "https://evil.example/steal"},
        {"redirect_uri": "http://127.0.0.1:9/other-path"},
    ):
        page = await flow.http.get("/authorize", params=flow.authorize_params(**overrides))
        assert page.status_code == 400, overrides
        assert "location" not in page.headers and "cannot continue" in page.text
    # A loopback redirect may come back on any port (native apps pick a free one).
    other_port = await flow.http.get(
        "/authorize", params=flow.authorize_params(redirect_uri="http://127.0.0.1:4711/callback")
    )
    assert other_port.status_code == 200 and 'name="api_key"' in other_port.text


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"code_challenge": None}, "invalid_request"),
        ({"code_challenge_method": "plain"}, "invalid_request"),
        ({"code_challenge_method": None}, "invalid_request"),
        ({"response_type": "token"}, "unsupported_response_type"),
        ({"resource": "https://elsewhere.example/mcp"}, "invalid_target"),
    ],
)
async def test_a_bad_authorization_request_goes_back_to_the_registered_redirect(
    server: RunningServer, flow: Flow, overrides: dict[str, str | None], error: str
) -> None:
    refused = await flow.http.get("/authorize", params=flow.authorize_params(**overrides))
    assert refused.status_code == 302
    answer = query_of(refused.headers["location"])
    assert refused.headers["location"].startswith(REDIRECT + "?")
    assert (
        answer["error"] == error and answer["iss"] == f"{server.base}/" and answer["state"].startswith("st-")
    )


async def test_the_sign_in_page_refuses_a_wrong_key_and_a_form_from_elsewhere(
    server: RunningServer, flow: Flow
) -> None:
    page = await flow.http.get("/authorize", params=flow.authorize_params())
    assert (
        '<input type="password" id="api_key" name="api_key"' in page.text and ">API key</label>" in page.text
    )
    assert "script" not in page.text and page.headers["x-frame-options"] == "DENY"
    wrong = await flow.sign_in("mmk_0123456789_not-a-key")
    assert (
        wrong.status_code == 401 and "not valid" in wrong.text and "sign_in" not in hidden_fields(wrong.text)
    )
    _, key = await _person(server)
    # The same form posted without the page's cookie (from another site): refused.
    fields = hidden_fields(page.text)
    async with httpx2.AsyncClient(base_url=server.base) as stranger:
        forged = await stranger.post("/authorize", data={**fields, "api_key": key})
    assert forged.status_code == 403 and "sign_in" not in forged.text


async def test_consent_narrows_never_widens_and_deny_says_access_denied(
    server: RunningServer, flow: Flow
) -> None:
    _, key = await _person(server)
    await make_space(server.db, "secret")
    widened = await flow.consent(await flow.sign_in(key), ["notes", "secret"])
    assert widened.status_code == 400 and "location" not in widened.headers
    nothing = await flow.consent(await flow.sign_in(key), [])
    assert nothing.status_code == 400 and "at least one space" in nothing.text
    denied = await flow.consent(await flow.sign_in(key), decision="deny")
    assert denied.status_code == 303
    answer = query_of(denied.headers["location"])
    assert answer["error"] == "access_denied" and answer["iss"] == f"{server.base}/" and "code" not in answer


async def test_a_wrong_or_missing_verifier_spends_the_code(server: RunningServer, flow: Flow) -> None:
    _, key = await _person(server)
    code = await flow.code(key)
    missing = await flow.exchange(code, code_verifier=None)
    assert missing.status_code == 400 and missing.json()["error"] == "invalid_request"
    wrong = await flow.exchange(code, code_verifier="x" * 43)
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"
    late = await flow.exchange(code)
    assert late.status_code == 400 and late.json()["error"] == "invalid_grant"


async def test_a_replayed_code_revokes_what_its_first_use_produced(server: RunningServer, flow: Flow) -> None:
    _, key = await _person(server)
    code = await flow.code(key)
    first = (await flow.exchange(code)).json()
    assert (await _who(flow.http, first["access_token"])).status_code == 200
    replay = await flow.exchange(code)
    assert replay.status_code == 400 and replay.json() == {
        "error": "invalid_grant",
        "error_description": "authorization code already used",
    }
    assert (await _who(flow.http, first["access_token"])).status_code == 401
    assert (await flow.refresh(first["refresh_token"])).json()["error"] == "invalid_grant"


async def test_a_token_for_another_audience_or_in_the_query_string_is_refused(
    server: RunningServer, flow: Flow
) -> None:
    _, key = await _person(server)
    code = await flow.code(key, resource=server.base)  # the server as a whole, not /mcp
    whole = (await flow.exchange(code, resource=server.base)).json()
    on_mcp = await _who(flow.http, whole["access_token"])
    assert on_mcp.status_code == 401 and 'error="invalid_token"' in on_mcp.headers["www-authenticate"]
    on_rest = await flow.http.get("/v1/whoami", headers={"Authorization": f"Bearer {whole['access_token']}"})
    assert on_rest.status_code == 200
    mcp_token = (await flow.tokens(key))["access_token"]
    in_query = await flow.http.post(f"/mcp?access_token={mcp_token}", json=TOOLS_LIST, headers=MCP_HEADERS)
    assert in_query.status_code == 401 and "error=" not in in_query.headers["www-authenticate"]
    other_resource = await flow.exchange(await flow.code(key), resource="https://elsewhere.example/mcp")
    assert other_resource.json()["error"] == "invalid_target"


async def test_an_expired_or_foreign_signed_token_is_invalid_token(server: RunningServer, flow: Flow) -> None:
    _, key = await _person(server)
    good = (await flow.tokens(key))["access_token"]
    claims = jwt.decode(good, options={"verify_signature": False})
    header = jwt.get_unverified_header(good)
    async with server.db.transaction() as conn:
        pem = (await conn.execute(text("SELECT private_pem FROM oauth_signing_keys"))).scalar_one()
    expired = jwt.encode(
        {**claims, "exp": int(time.time()) - 5},
        serialization.load_pem_private_key(pem.encode(), None),
        algorithm="EdDSA",
        headers=header,
    )  # type: ignore[arg-type]
    foreign = jwt.encode(claims, Ed25519PrivateKey.generate(), algorithm="EdDSA", headers=header)
    for token in (expired, foreign, good[:-4] + "AAAA"):
        refused = await _who(flow.http, token)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith('Bearer error="invalid_token"')
    assert (await _who(flow.http, good)).status_code == 200


async def test_token_endpoint_errors_are_rfc_6749_json(server: RunningServer, flow: Flow) -> None:
    async def post(data: dict[str, str]) -> httpx2.Response:
        return await flow.http.post("/token", data=data)

    unsupported = await post({"grant_type": "password", "client_id": flow.client_id})
    assert unsupported.status_code == 400 and unsupported.json()["error"] == "unsupported_grant_type"
    anonymous = await post({"grant_type": "authorization_code", "code": "x"})
    assert anonymous.status_code == 401 and anonymous.json()["error"] == "invalid_client"
    unknown = await post(
        {"grant_type": "refresh_token", "client_id": flow.client_id, "refresh_token": "mmr_nope"}
    )
    assert unknown.status_code == 400 and unknown.json()["error"] == "invalid_grant"
    as_json = await flow.http.post("/token", json={"grant_type": "authorization_code"})
    assert as_json.status_code == 400 and as_json.json()["error"] == "invalid_request"
    twice = await flow.http.post(
        "/token",
        content="grant_type=refresh_token&grant_type=refresh_token",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert twice.status_code == 400 and twice.json()["error"] == "invalid_request"


async def test_revocation_and_a_revoked_key_stop_tokens_at_once(server: RunningServer, flow: Flow) -> None:
    user, key = await _person(server)
    revoked_by_app = await flow.tokens(key)
    assert (
        await flow.http.post("/revoke", data={"token": revoked_by_app["refresh_token"]})
    ).status_code == 200
    assert (await _who(flow.http, revoked_by_app["access_token"])).status_code == 401
    assert (await flow.http.post("/revoke", data={"token": "whatever"})).status_code == 200
    by_access = await flow.tokens(key)
    assert (await flow.http.post("/revoke", data={"token": by_access["access_token"]})).status_code == 200
    assert (await flow.refresh(by_access["refresh_token"])).json()["error"] == "invalid_grant"

    live = await flow.tokens(key)
    await apikeys.revoke_key(server.db, f"{user}-key")
    assert (await _who(flow.http, live["access_token"])).status_code == 401
    assert (await flow.refresh(live["refresh_token"])).json()["error"] == "invalid_grant"


async def test_a_removed_grant_or_a_deactivated_user_applies_on_the_next_request(
    server: RunningServer, flow: Flow
) -> None:
    user, key = await _person(server)
    tokens = await flow.tokens(key)
    await apikeys.update_key(server.db, f"{user}-key", grants=[apikeys.GrantSpec("notes", Access.READ_WRITE)])
    grants = (await _who(flow.http, tokens["access_token"])).json()["result"]["structuredContent"]["grants"]
    assert [g["space"] for g in grants] == ["notes"]
    await users.upsert_user(server.db, user, f"{user}@example.com", "Gone", Role.WRITER, active=False)
    assert (await _who(flow.http, tokens["access_token"])).status_code == 401
    assert (await flow.refresh(tokens["refresh_token"])).json()["error"] == "invalid_grant"


async def test_registration_checks_redirects_and_is_rate_limited(
    db_urls: tuple[str, str], embedder: Embedder
) -> None:
    async with (
        run_server(
            db_urls[0], embedder, oauth_registrations_per_hour=3, oauth_redirect_hosts=["claude.ai"]
        ) as running,
        httpx2.AsyncClient(base_url=running.base) as http,
    ):
        plain_http = await http.post("/register", json={"redirect_uris": ["http://example.com/cb"]})
        other_host = await http.post("/register", json={"redirect_uris": ["https://example.com/cb"]})
        allowed = await http.post(
            "/register",
            json={
                "redirect_uris": ["https://claude.ai/api/mcp/auth_callback"],
                "token_endpoint_auth_method": "client_secret_post",
            },
        )
        over = await http.post("/register", json={"redirect_uris": ["http://localhost:3000/cb"]})
    assert plain_http.status_code == other_host.status_code == 400
    assert plain_http.json()["error"] == other_host.json()["error"] == "invalid_redirect_uri"
    assert allowed.status_code == 201 and allowed.json()["token_endpoint_auth_method"] == "none"
    assert over.status_code == 429 and int(over.headers["retry-after"]) >= 1


async def test_text_the_database_cannot_hold_is_refused_not_a_500(server: RunningServer, flow: Flow) -> None:
    nul = "a\x00b"
    page = await flow.http.get("/authorize", params=flow.authorize_params(client_id=nul))
    state = await flow.http.get("/authorize", params=flow.authorize_params(state=nul))
    token = await flow.http.post(
        "/token", data={"grant_type": "authorization_code", "client_id": nul, "code": "x"}
    )
    named = await flow.http.post("/register", json={"client_name": nul, "redirect_uris": [REDIRECT]})
    redirect = await flow.http.post("/register", json={"redirect_uris": [REDIRECT + nul]})
    assert (page.status_code, state.status_code) == (400, 400)
    assert token.status_code == 400 and token.json()["error"] == "invalid_request"
    assert named.status_code == redirect.status_code == 400
    key = await flow.sign_in("mmk_01234\x0056789_secret")
    assert key.status_code == 401 and "not valid" in key.text


async def test_a_throttled_back_channel_answers_in_the_oauth_shape(
    db_urls: tuple[str, str], embedder: Embedder
) -> None:
    # OAuth libraries read `error` of a token endpoint's answer; the REST error object would leave
    # them with nothing to show.
    async with (
        run_server(db_urls[0], embedder, auth_failure_limit=2) as running,
        httpx2.AsyncClient(base_url=running.base) as http,
    ):
        answers = [
            await http.post("/token", data={"grant_type": "authorization_code", "code": "x"})
            for _ in range(4)
        ]
    assert [a.status_code for a in answers] == [401, 401, 429, 429]
    over = answers[-1]
    assert over.json()["error"] == "slow_down" and set(over.json()) == {"error", "error_description"}
    assert "retry in" in over.json()["error_description"] and int(over.headers["retry-after"]) >= 1
    assert over.headers["cache-control"] == "no-store"
