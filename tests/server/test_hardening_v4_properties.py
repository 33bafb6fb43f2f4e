"""No untrusted input on the auth paths is a 5xx: arbitrary bearer strings, JWT headers and payloads
(some naming this server's key), client metadata and form bodies sent to ``/authorize``, ``/token``,
``/revoke``, ``/register``, ``/v1`` and ``/mcp`` of a real ``memory-mcp serve``; failures are
throttled past the budget on every path, and the log stays bounded."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import httpx2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_mcp.store.access import Access
from memory_mcp.store.db import Database
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import serve_process
from tests.server.oauth_flow import REDIRECT, Flow

LIMIT = 5  # failed authentications per address before 429
EXAMPLES = 150  # per run; about a minute on two shared cores
PRINTABLE = st.characters(min_codepoint=0x20, max_codepoint=0x7E)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@st.composite
def jwts(draw: st.DrawFn, kid: str) -> str:
    header: Any = draw(
        st.one_of(
            JSON,
            st.fixed_dictionaries(
                {
                    "alg": st.sampled_from(["EdDSA", "none", "HS256", "RS256"]),
                    "kid": st.just(kid) | st.text(),
                },
                optional={"typ": st.just("at+jwt") | st.text(max_size=8)},
            ),
        )
    )
    payload: Any = draw(
        st.one_of(
            JSON,
            st.fixed_dictionaries(
                {},
                optional={
                    name: JSON
                    for name in ("iss", "aud", "exp", "iat", "key", "fam", "spaces", "sub", "client_id")
                },
            ),
        )
    )
    parts = [json.dumps(header).encode(), json.dumps(payload).encode()]
    if draw(st.booleans()):
        parts[draw(st.integers(0, 1))] = nested(draw(st.integers(200, 3000)))
    signature = draw(st.binary(max_size=80))
    return ".".join([b64(parts[0]), b64(parts[1]), b64(signature)])


@st.composite
def requests(draw: st.DrawFn, kid: str, client_id: str) -> tuple[str, str, dict[str, Any]]:
    """(method, path, httpx2 keyword arguments) of one hostile request."""
    bearer = draw(st.one_of(st.text(PRINTABLE, max_size=120), jwts(kid), st.just("mmk_" + "a" * 40)))
    authorization = f"Bearer {bearer}".strip()  # a header value neither starts nor ends with a space
    form = draw(
        st.dictionaries(
            st.sampled_from(
                [
                    "grant_type",
                    "code",
                    "refresh_token",
                    "client_id",
                    "redirect_uri",
                    "code_verifier",
                    "resource",
                    "token",
                    "response_type",
                    "state",
                    "code_challenge",
                    "code_challenge_method",
                    "csrf",
                    "api_key",
                    "sign_in",
                    "decision",
                ]
            ),
            st.one_of(
                st.text(max_size=60),
                st.sampled_from(["authorization_code", "refresh_token", "S256", "code", client_id, REDIRECT]),
                jwts(kid),
                st.just("mmr_" + "b" * 43),
            ),
            max_size=8,
        )
    )
    target = draw(st.integers(0, 7))
    if target == 0:
        return "GET", "/v1/whoami", {"headers": {"Authorization": authorization}}
    if target == 1:
        return (
            "POST",
            "/mcp",
            {
                "json": {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                "headers": {
                    "Authorization": authorization,
                    "Accept": "application/json, text/event-stream",
                },
            },
        )
    if target == 2:
        return "POST", "/revoke", {"data": {"token": bearer, **form}}
    if target == 3:
        return "POST", "/token", {"data": form}
    if target == 4:
        metadata = draw(
            st.one_of(
                JSON,
                st.fixed_dictionaries(
                    {"redirect_uris": st.lists(st.text(max_size=40) | st.just(REDIRECT), max_size=3) | JSON},
                    optional={"grant_types": JSON, "response_types": JSON, "client_name": JSON},
                ),
            )
        )
        if draw(st.booleans()):
            return "POST", "/register", {"json": metadata}
        raw = draw(st.binary(max_size=200)) if draw(st.booleans()) else nested(draw(st.integers(500, 5000)))
        return "POST", "/register", {"content": raw, "headers": {"Content-Type": "application/json"}}
    if target == 5:
        return "GET", "/authorize", {"params": form}
    if target == 6:
        return "POST", "/authorize", {"data": form}
    return "POST", "/authorize/consent", {"data": form}


def prepared(database_url: str, base: str) -> tuple[str, str]:
    """A registered client and this server's signing key id (from a real token)."""

    async def arrange() -> tuple[str, str]:
        db = Database(database_url, pool_size=1)
        try:
            space = await make_space(db)
            key = await make_key(db, await make_user(db), {space: Access.READ}, space)
        finally:
            await db.close()
        async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
            flow = Flow(http)
            await flow.register()
            token = (await flow.tokens(key))["access_token"]
        header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
        return flow.client_id, str(header["kid"])

    return asyncio.run(arrange())


def test_no_hostile_input_on_the_auth_paths_is_a_5xx_and_failures_are_throttled(
    db_urls: tuple[str, str],
) -> None:
    env = {
        "MEMORY_MCP_AUTH_FAILURE_LIMIT": str(LIMIT),
        "MEMORY_MCP_DOCUMENT_WORKERS": "0",
        # Each example comes from an address of its own, so the budget of one does not hide the
        # paths behind it from the next; the throttle is checked last, from one address.
        "MEMORY_MCP_FORWARDED_ALLOW_IPS": '["127.0.0.1", "::1"]',
    }
    with serve_process(db_urls[0], **env) as served, httpx2.Client(base_url=served.base, timeout=60) as http:
        client_id, kid = prepared(db_urls[0], served.base)
        statuses: dict[int, int] = {}
        counter = iter(range(1, 1 << 30))

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(requests(kid, client_id))
        def no_5xx(request: tuple[str, str, dict[str, Any]]) -> None:
            method, path, kwargs = request
            n = next(counter)
            headers = {
                **kwargs.pop("headers", {}),
                "X-Forwarded-For": f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}",
            }
            answer = http.request(method, path, headers=headers, **kwargs)
            statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
            assert answer.status_code < 500, (method, path, kwargs, answer.status_code, answer.text[:300])

        no_5xx()
        assert sum(statuses.values()) >= EXAMPLES

        # One address over the budget: every path that reads a credential answers 429.
        one = {"X-Forwarded-For": "192.0.2.9"}
        forged = ".".join(
            [b64(json.dumps({"alg": "EdDSA", "kid": kid, "typ": "at+jwt"}).encode()), "e30", "c2ln"]
        )
        for _ in range(LIMIT):
            http.get("/v1/whoami", headers={**one, "Authorization": f"Bearer {forged}"})
        assert http.get("/v1/whoami", headers={**one, "Authorization": f"Bearer {forged}"}).status_code == 429
        mcp = http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={**one, "Authorization": f"Bearer {forged}", "Accept": "application/json"},
        )
        assert mcp.status_code == 429
        assert http.post("/revoke", data={"token": forged}, headers=one).status_code == 429
        bad_client = {"grant_type": "refresh_token", "refresh_token": "mmr_x", "client_id": "nobody"}
        assert http.post("/token", data=bad_client, headers=one).status_code == 429

        # The log stays bounded: a few lines a minute per reason, however many refusals.
        served.proc.terminate()
        served.proc.wait(timeout=60)
        assert served.proc.stderr is not None
        log = served.proc.stderr.read()
        served.proc.stderr.close()
        served.proc.stderr = None  # read here: the fixture has nothing left to read
    assert "Traceback" not in log and "unhandled" not in log, log[-2000:]
    assert len(log.splitlines()) < 200, len(log.splitlines())
