"""An external OpenID Connect provider issues the tokens (``oauth_issuer``): a real issuer on loopback
(https, its own CA through SSL_CERT_FILE) serves its discovery document and the JWKS of a key made
here, tokens signed with it go to /mcp through a real MCP client, and every refusal is a 401 with
``error="invalid_token"``."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from memory_mcp.embedder.client import Embedder
from memory_mcp.store import apikeys, users
from memory_mcp.store.access import Access, Role
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer, mcp_session, run_server
from tests.server.loopback_tls import Certificates, HttpsServer, make_certificates, serve_https

REALM = "/realms/memory"
JWKS_PATH = REALM + "/protocol/openid-connect/certs"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


class Issuer:
    """The provider: its https server, its signing keys (kid -> key) and the JWKS it publishes."""

    def __init__(self, https: HttpsServer) -> None:
        self.https = https
        self.url = https.base + REALM
        self.keys: dict[str, ec.EllipticCurvePrivateKey] = {}
        https.documents[REALM + "/.well-known/openid-configuration"] = json.dumps(
            {"issuer": self.url, "jwks_uri": https.base + JWKS_PATH}
        ).encode()
        self.publish("k1")

    def publish(self, kid: str) -> None:
        self.keys[kid] = ec.generate_private_key(ec.SECP256R1())
        published = []
        for name, key in self.keys.items():
            jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
            published.append({**jwk, "kid": name, "use": "sig", "alg": "ES256"})
        self.https.documents[JWKS_PATH] = json.dumps({"keys": published}).encode()

    def token(
        self, audience: str, kid: str = "k1", key: Any = None, algorithm: str = "ES256", **claims: Any
    ) -> str:
        now = int(time.time())
        payload = {"iss": self.url, "aud": audience, "iat": now, "exp": now + 300, "sub": "u1", **claims}
        return jwt.encode(payload, key or self.keys[kid], algorithm=algorithm, headers={"kid": kid})


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    return make_certificates(tmp_path)


@pytest.fixture
def issuer(certificates: Certificates, monkeypatch: pytest.MonkeyPatch) -> Iterator[Issuer]:
    monkeypatch.setenv("SSL_CERT_FILE", str(certificates.ca))
    with serve_https(certificates) as https:
        yield Issuer(https)


@pytest.fixture
async def server(
    db_urls: tuple[str, str], embedder: Embedder, issuer: Issuer
) -> AsyncIterator[RunningServer]:
    async with run_server(
        db_urls[0],
        embedder,
        oauth_issuer=issuer.url,
        oauth_issuer_allow_loopback=True,
        oauth_issuer_refetch_s=0,
    ) as running:
        yield running


async def _status(server: RunningServer, token: str) -> tuple[int, str]:
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        answer = await http.post(
            "/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"}
        )
    return answer.status_code, answer.headers.get("www-authenticate", "")


def _unsigned(issuer: Issuer, audience: str) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    now = int(time.time())
    claims = {"iss": issuer.url, "aud": audience, "exp": now + 300, "email": "x@example.com"}
    return part({"alg": "none", "kid": "k1", "typ": "JWT"}) + "." + part(claims) + "."


async def test_a_provider_token_gets_the_union_of_the_users_live_keys_and_loses_a_revoked_one(
    server: RunningServer, issuer: Issuer
) -> None:
    db = server.db
    for space in ("notes", "team", "shared"):
        await make_space(db, space)
    user = await make_user(db, "ada")
    await make_key(db, user, {"notes": Access.READ_WRITE, "shared": Access.READ}, "notes", name="laptop")
    await make_key(db, user, {"team": Access.READ, "shared": Access.READ_WRITE}, "team", name="ci")
    token = issuer.token(server.mcp_url, email="ADA@example.com", email_verified=True)

    async with mcp_session(server, token) as mcp:
        me = await mcp.ok("whoAmI")
        assert me["user"]["email"] == "ada@example.com"
        assert {g["space"]: g["effective"] for g in me["grants"]} == {
            "notes": "ReadWrite",
            "shared": "ReadWrite",  # the higher of the two keys' grants
            "team": "Read",
        }
        assert me["key"]["name"] == "ci" and me["activeSpace"] == "team"  # the key changed last
        await mcp.ok("add_memory", content="The build runs on Fridays", containerTag="notes")
        assert await apikeys.revoke_key(db, "laptop")
        # The next request of the same session: the revoked key's grants are gone.
        after = await mcp.ok("whoAmI")
        assert {g["space"]: g["effective"] for g in after["grants"]} == {
            "shared": "ReadWrite",
            "team": "Read",
        }
        refused = await mcp.error("add_memory", content="Another note", containerTag="notes")
        assert "notes" in refused

    assert await apikeys.revoke_key(db, "ci")  # no live key left: the token names nobody usable
    status, challenge = await _status(server, token)
    assert status == 401 and challenge.startswith('Bearer error="invalid_token"')


async def test_a_reader_gets_read_everywhere_and_a_name_claim_maps_by_name(
    db_urls: tuple[str, str], embedder: Embedder, issuer: Issuer
) -> None:
    async with run_server(
        db_urls[0],
        embedder,
        oauth_issuer=issuer.url,
        oauth_issuer_allow_loopback=True,
        oauth_user_claim="preferred_username",
        oauth_audience="memory-mcp",
    ) as server:
        await make_space(server.db, "notes")
        user = await make_user(server.db, "grace", role=Role.READER)
        await make_key(server.db, user, {"notes": Access.READ_WRITE}, "notes")
        token = issuer.token("memory-mcp", preferred_username="grace")
        async with mcp_session(server, token) as mcp:
            me = await mcp.ok("whoAmI")
        assert [(g["space"], g["granted"], g["effective"]) for g in me["grants"]] == [
            ("notes", "ReadWrite", "Read")
        ]
        # The configured audience replaces the resource's URL.
        assert (await _status(server, issuer.token(server.mcp_url, preferred_username="grace")))[0] == 401


async def test_refused_tokens_are_401_invalid_token(server: RunningServer, issuer: Issuer) -> None:
    await make_space(server.db, "notes")
    user = await make_user(server.db, "ada")
    await make_key(server.db, user, {"notes": Access.READ}, "notes")
    other = await make_user(server.db, "bob")
    await make_key(server.db, other, {"notes": Access.READ}, "notes")
    await users.upsert_user(server.db, other, "bob@example.com", "Bob", Role.WRITER, False)
    keyless = await make_user(server.db, "eve")
    stranger = ec.generate_private_key(ec.SECP256R1())
    aud = server.mcp_url
    now = int(time.time())
    refused = {
        "wrong aud": issuer.token(server.base + "/other", email="ada@example.com"),
        "wrong iss": issuer.token(
            aud, email="ada@example.com", iss="https://elsewhere.example/realms/memory"
        ),
        "expired": issuer.token(aud, email="ada@example.com", iat=now - 900, exp=now - 600),
        "not yet": issuer.token(aud, email="ada@example.com", nbf=now + 600),
        "unknown kid": issuer.token(aud, kid="k9", key=stranger, email="ada@example.com"),
        "known kid, other key": issuer.token(aud, key=stranger, email="ada@example.com"),
        "alg none": _unsigned(issuer, aud),
        "HS256": issuer.token(
            aud, key="a-shared-secret-of-32-bytes-long!", algorithm="HS256", email="ada@example.com"
        ),
        "unverified email": issuer.token(aud, email="ada@example.com", email_verified=False),
        "no claim": issuer.token(aud),
        "unknown user": issuer.token(aud, email="nobody@example.com"),
        "deactivated user": issuer.token(aud, email="bob@example.com"),
        "user without a key": issuer.token(aud, email=f"{keyless}@example.com"),
    }
    answers = {case: await _status(server, token) for case, token in refused.items()}
    assert {case: status for case, (status, _) in answers.items()} == dict.fromkeys(refused, 401)
    assert all(c.startswith('Bearer error="invalid_token"') for _, c in answers.values()), answers
    # The control: the same issuer, audience and user, properly signed, gets in.
    assert (await _status(server, issuer.token(aud, email="ada@example.com")))[0] == 200


async def test_a_key_rotated_at_the_provider_is_fetched_and_the_built_in_server_is_off(
    server: RunningServer, issuer: Issuer
) -> None:
    await make_space(server.db, "notes")
    await make_key(server.db, await make_user(server.db, "ada"), {"notes": Access.READ}, "notes")
    assert (await _status(server, issuer.token(server.mcp_url, email="ada@example.com")))[0] == 200
    fetched = issuer.https.requests.count(JWKS_PATH)
    issuer.publish("k2")  # a new signing key, unknown to the server's cached JWKS
    assert (await _status(server, issuer.token(server.mcp_url, kid="k2", email="ada@example.com")))[0] == 200
    assert issuer.https.requests.count(JWKS_PATH) == fetched + 1
    assert (await _status(server, issuer.token(server.mcp_url, email="ada@example.com")))[0] == 200
    assert issuer.https.requests.count(JWKS_PATH) == fetched + 1  # a known kid: from the cache

    # The REST API, the same server, also takes a token for the server as a whole; /mcp does not.
    whole = issuer.token(server.base, email="ada@example.com")
    assert (await _status(server, whole))[0] == 401
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        me = await http.get("/v1/whoami", headers={"Authorization": f"Bearer {whole}"})
        assert me.status_code == 200 and me.json()["user"]["email"] == "ada@example.com"
        prm = (await http.get("/.well-known/oauth-protected-resource/mcp")).json()
        assert prm["resource"] == server.mcp_url and prm["authorization_servers"] == [issuer.url]
        for path in ("/authorize", "/.well-known/oauth-authorization-server"):
            assert (await http.get(path)).status_code == 404, path
        for path in ("/token", "/register"):
            assert (await http.post(path, data={})).status_code in (404, 405), path
        challenge = (await http.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)).headers[
            "www-authenticate"
        ]
        assert (
            challenge
            == f'Bearer resource_metadata="{server.base}/.well-known/oauth-protected-resource/mcp", scope="memory"'
        )


async def test_a_provider_out_of_reach_defers_its_tokens_not_the_keys_and_is_not_asked_each_time(
    db_urls: tuple[str, str], embedder: Embedder, issuer: Issuer
) -> None:
    # A token that cannot be checked is answered 503 (tests/test_outages.py), not 401: a 401 would
    # make the client drop it and sign its person out.
    async with run_server(db_urls[0], embedder, oauth_issuer=issuer.url) as guarded:
        await make_space(guarded.db, "notes")
        key = await make_key(guarded.db, await make_user(guarded.db, "ada"), {"notes": Access.READ}, "notes")
        token = issuer.token(guarded.mcp_url, email="ada@example.com")
        # Without the loopback setting, an issuer on a loopback address is never connected to.
        assert (await _status(guarded, token)) == (503, "") and issuer.https.requests == []
        assert (await _status(guarded, key))[0] == 200
    discovery = REALM + "/.well-known/openid-configuration"
    published = issuer.https.documents.pop(discovery)
    async with run_server(
        db_urls[0], embedder, oauth_issuer=issuer.url, oauth_issuer_allow_loopback=True
    ) as server:
        token = issuer.token(server.mcp_url, email="ada@example.com")
        assert [await _status(server, token) for _ in range(3)] == [(503, "")] * 3
        assert issuer.https.requests == [discovery]  # one failed fetch, then a wait
    issuer.https.documents[discovery] = published
