"""Hardening v4, through HTTP and the command line: forged and malformed tokens on every path that
reads one, the refresh race, redirect URIs and metadata documents built to slip through, IPv6
forms of private addresses, hostile imports, and reports that never quote a refused credential."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from sqlalchemy import text

from bench import upload_bombs
from memory_mcp.embedder.client import Embedder
from memory_mcp.server import oauth_cimd
from memory_mcp.store import spaces
from memory_mcp.store.access import Access
from memory_mcp.store.db import Database
from tests.cli_support import Admin
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer, free_port, run_server, serve_process
from tests.server.loopback_tls import Certificates, HttpsServer, make_certificates, serve_https
from tests.server.oauth_flow import REDIRECT, Flow

LIMIT = 4  # failed authentications per address before 429, for these servers
MCP_CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token_of(header: Any, payload: Any, signature: bytes = b"\x00" * 64) -> str:
    raw = [h if isinstance(h, bytes) else json.dumps(h).encode() for h in (header, payload)]
    return ".".join([b64(raw[0]), b64(raw[1]), b64(signature)])


def kid_of(token: str) -> str:
    header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    return str(header["kid"])


@pytest.fixture
async def strict(db_urls: tuple[str, str], embedder: Embedder) -> AsyncIterator[RunningServer]:
    async with run_server(db_urls[0], embedder, auth_failure_limit=LIMIT) as running:
        yield running


async def signed_in(server: RunningServer, http: httpx2.AsyncClient) -> tuple[Flow, dict[str, Any]]:
    space = await make_space(server.db)
    key = await make_key(server.db, await make_user(server.db), {space: Access.READ_WRITE}, space)
    flow = Flow(http)
    await flow.register()
    return flow, await flow.tokens(key)


async def answers(http: httpx2.AsyncClient, token: str) -> list[int]:
    """The status of ``token`` presented on ``/v1``, ``/mcp`` and ``/revoke``."""
    bearer = {"Authorization": f"Bearer {token}"}
    return [
        (await http.get("/v1/whoami", headers=bearer)).status_code,
        (
            await http.post("/mcp", json=MCP_CALL, headers={**bearer, "Accept": "application/json"})
        ).status_code,
        (await http.post("/revoke", data={"token": token})).status_code,
    ]


async def test_forged_and_deeply_nested_tokens_are_refused_and_throttled_never_a_500(
    strict: RunningServer,
) -> None:
    async with httpx2.AsyncClient(base_url=strict.base, timeout=30) as http:
        flow, tokens = await signed_in(strict, http)
        real = tokens["access_token"]
        ours = {"alg": "EdDSA", "kid": kid_of(real), "typ": "at+jwt"}
        claims = json.loads(base64.urlsafe_b64decode(real.split(".")[1] + "=="))
        nested = b"[" * 1500 + b"]" * 1500
        hostile = [
            token_of(ours, claims),  # our kid, a signature that is not ours
            token_of(ours, {**claims, "iss": "https://elsewhere.example/"}),
            token_of(ours, b"not json"),
            ".".join([b64(nested), b64(b"{}"), "sig"]),  # F11: 3 KB of nested header
            ".".join([b64(b'{"kid":' + b"[" * 700 + b"]" * 700 + b"}"), b64(b"{}"), "sig"]),
            token_of(ours, json.loads("[" * 200 + "]" * 200)),
        ]
        seen: list[int] = []
        for token in hostile:
            seen += await answers(http, token)
        assert not [s for s in seen if s >= 500], seen
        assert set(seen[:3]) <= {401, 200, 429}
        # Each refusal counted: past the budget every path answers 429, /revoke's 200 included.
        assert await answers(http, hostile[0]) == [429, 429, 429]
        # The real token was neither revoked by the forgeries nor refused for them.
        async with httpx2.AsyncClient(base_url=strict.base, timeout=30) as fresh:
            who = await fresh.get("/v1/whoami", headers={"Authorization": f"Bearer {real}"})
        assert who.status_code == 200, who.text
        assert flow.client_id


async def test_a_nested_header_is_refused_by_an_external_issuer_resource_server(
    db_urls: tuple[str, str], embedder: Embedder
) -> None:
    nested = ".".join([b64(b"[" * 1000 + b"]" * 1000), b64(b"{}"), "sig"])
    async with (
        run_server(db_urls[0], embedder, oauth_issuer="https://issuer.invalid/") as server,
        httpx2.AsyncClient(base_url=server.base, timeout=30) as http,
    ):
        answer = await http.get("/v1/whoami", headers={"Authorization": f"Bearer {nested}"})
    assert answer.status_code == 401, answer.text


async def test_two_refreshes_racing_with_one_token_revoke_the_grant(server: RunningServer) -> None:
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        flow, _ = await signed_in(server, http)
        space = await make_space(server.db)
        key = await make_key(server.db, await make_user(server.db), {space: Access.READ}, space)
        for _ in range(6):
            tokens = await flow.tokens(key)
            first, second = await asyncio.gather(
                flow.refresh(tokens["refresh_token"]), flow.refresh(tokens["refresh_token"])
            )
            codes = sorted([first.status_code, second.status_code])
            assert codes in ([200, 400], [400, 400]), (first.text, second.text)
            for answer in (first, second):
                if answer.status_code == 400:
                    assert answer.json()["error"] == "invalid_grant"
            winner = first if first.status_code == 200 else second
            if winner.status_code != 200:
                continue
            # The loser's refusal revoked the family: what the winner got is dead too.
            later = await flow.refresh(winner.json()["refresh_token"])
            assert later.status_code == 400, later.text
            bearer = {"Authorization": f"Bearer {winner.json()['access_token']}"}
            assert (await http.get("/v1/whoami", headers=bearer)).status_code == 401


@pytest.mark.parametrize(
    "requested",
    [
        "http://127.0.0.1:5555/callback#frag",
        "http://127.0.0.1:5555/callback#",
        "http://evil@127.0.0.1:5555/callback",
        "http://user:pw@127.0.0.1:5555/callback",
        "http://127.0.0.1:5555/call\tback",
        "http://127.0.0.1:5555/call\nback",
        "http://127.0.0.1:5555/call\r\nSet-Cookie: a=b",
        "http://127.0.0.1:5555/callback ",
    ],
)
async def test_a_loopback_redirect_with_a_fragment_credentials_or_breaks_is_refused(
    server: RunningServer, requested: str
) -> None:
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        flow = Flow(http)
        await flow.register()
        answer = await http.get("/authorize", params=flow.authorize_params(redirect_uri=requested))
        assert answer.status_code == 400, answer.text
        assert "location" not in answer.headers
        same = await http.get("/authorize", params=flow.authorize_params(redirect_uri=REDIRECT))
        assert same.status_code == 200
        registered = await http.post("/register", json={"client_name": "x", "redirect_uris": [requested]})
        assert registered.status_code == 400 and registered.json()["error"] == "invalid_redirect_uri"


async def test_client_registration_with_hostile_metadata_is_a_400(server: RunningServer) -> None:
    bodies: list[Any] = [
        {"redirect_uris": [REDIRECT], "grant_types": ["authorization_code", {"a": 1}]},
        {"redirect_uris": [REDIRECT], "grant_types": [["authorization_code"]]},
        {"redirect_uris": [REDIRECT], "response_types": [{}]},
    ]
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        for body in bodies:
            answer = await http.post("/register", json=body)
            assert answer.status_code == 400, (body, answer.text)
        nested = b'{"redirect_uris": ' + b"[" * 3000 + b"]" * 3000 + b"}"
        answer = await http.post("/register", content=nested, headers={"Content-Type": "application/json"})
        assert answer.status_code == 400 and answer.json()["error"] == "invalid_client_metadata"


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    return make_certificates(tmp_path)


@pytest.fixture
def documents(certificates: Certificates, monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpsServer]:
    monkeypatch.setenv("SSL_CERT_FILE", str(certificates.ca))
    with serve_https(certificates) as https:
        yield https


async def test_a_deeply_nested_client_metadata_document_is_an_error_page(
    db_urls: tuple[str, str], embedder: Embedder, documents: HttpsServer
) -> None:
    path = "/nested/client.json"
    client_id = documents.base + path
    documents.documents[path] = (
        b'{"client_id": "' + client_id.encode() + b'", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    )
    async with (
        run_server(
            db_urls[0], embedder, oauth_cimd_allow_loopback=True, oauth_cimd_max_bytes=65536
        ) as server,
        httpx2.AsyncClient(base_url=server.base, timeout=30) as http,
    ):
        answer = await http.get("/authorize", params=Flow(http, client_id=client_id).authorize_params())
    assert answer.status_code == 400, answer.text
    assert "is not JSON" in answer.text


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254 (cloud metadata)
        "64:ff9b:1::a00:1",  # local-use NAT64
        "2002:a00:1::1",  # 6to4 of 10.0.0.1
        "2002:7f00:1::1",  # 6to4 of 127.0.0.1
        "::7f00:1",  # IPv4-compatible 127.0.0.1
        "::a9fe:a9fe",  # IPv4-compatible 169.254.169.254
    ],
)
async def test_ipv6_forms_that_carry_a_private_ipv4_address_are_refused(
    server: RunningServer, address: str
) -> None:
    client_id = f"https://[{address}]/oauth/client.json"
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        answer = await http.get("/authorize", params=Flow(http, client_id=client_id).authorize_params())
    assert answer.status_code == 400
    assert "points at a private or local address" in answer.text


# --- imports ----------------------------------------------------------------------------------------

GITHUB_TOKEN = "ghp_" + "R8vQ2kLx9TzW4mNp7YcB3dHf6JsA1gEu5oKi"  # fake, shaped like one


async def curator_of(server: RunningServer, space: str) -> str:
    await make_space(server.db, space)
    return await make_key(server.db, await make_user(server.db), {space: "Curate"}, space)


async def post_import(
    server: RunningServer, key: str, space: str, fmt: str, name: str, content: bytes
) -> httpx2.Response:
    async with httpx2.AsyncClient(base_url=server.base, timeout=300) as http:
        return await http.post(
            f"/v1/spaces/{space}/import",
            params={"from": fmt},
            files={"file": (name, content)},
            headers={"Authorization": f"Bearer {key}"},
        )


def chatgpt_export(title: str) -> bytes:
    message: dict[str, Any] = {
        "id": "m1",
        "message": {
            "author": {"role": "user"},
            "content": {"content_type": "text", "parts": [f"the deploy key is {GITHUB_TOKEN} keep it"]},
            "create_time": 1_700_000_000,
        },
        "parent": None,
        "children": [],
    }
    return json.dumps(
        [{"title": title, "id": "c1", "mapping": {"m1": message}, "current_node": "m1"}]
    ).encode()


def memory_json_export() -> bytes:
    entity = {"type": "entity", "name": f"token {GITHUB_TOKEN}", "entityType": "note", "observations": ["x"]}
    relation = {"type": "relation", "from": GITHUB_TOKEN, "relationType": "owns", "to": "the repo"}
    return (json.dumps(entity) + "\n" + json.dumps(relation) + "\n").encode()


async def test_an_import_report_never_quotes_the_credential_it_refused(
    server: RunningServer, db_urls: tuple[str, str], tmp_path: Path
) -> None:
    key = await curator_of(server, "quoted")
    exports = {
        "chatgpt": ("conversations.json", chatgpt_export(f"Deploy with {GITHUB_TOKEN} tonight")),
        "memory-json": ("memory.json", memory_json_export()),
    }
    admin = Admin(db_urls[1])
    for fmt, (name, content) in exports.items():
        answer = await post_import(server, key, "quoted", fmt, name, content)
        assert answer.status_code == 200, answer.text
        assert answer.json()["skipped"], answer.text
        assert GITHUB_TOKEN not in answer.text and GITHUB_TOKEN[:20] not in answer.text
        assert any("looks like a GitHub token" in s for s in answer.json()["skipped"])
        source = tmp_path / name
        source.write_bytes(content)
        dry = admin.ok("import", "--from", fmt, str(source), "--space", "quoted", "--dry-run")
        assert "would skip" in dry.stdout + dry.stderr
        assert GITHUB_TOKEN[:20] not in dry.stdout + dry.stderr


async def test_markdown_with_deeply_nested_front_matter_or_export_comments_is_skipped_not_a_500(
    server: RunningServer,
) -> None:
    key = await curator_of(server, "notes")
    front = (
        b"---\ntitle: Deep\nx: "
        + b"[" * 3000
        + b"]" * 3000
        + b"\n---\nThe greenhouse vents open at 24 degrees.\n"
    )
    answer = await post_import(server, key, "notes", "markdown", "deep.md", front)
    assert answer.status_code == 200, answer.text
    assert any("front matter is nested too deeply" in s for s in answer.json()["skipped"])
    assert answer.json()["documents"] == 1
    comment = (
        b"# Space notes\n\n- The boiler is serviced every September.\n  <!-- memory-mcp "
        + b"[" * 3000
        + b"]" * 3000
        + b" -->\n"
    )
    answer = await post_import(server, key, "notes", "markdown", "export.md", comment)
    assert answer.status_code == 200, answer.text
    assert any("its comment is not the export's" in s for s in answer.json()["skipped"])


async def test_two_imports_of_one_file_at_once_never_duplicate_or_fail_with_a_500(
    server: RunningServer,
) -> None:
    key = await curator_of(server, "twice")
    lines = [
        json.dumps(
            {
                "type": "memory",
                "id": f"m{i}",
                "content": f"Fact {i}: crate {i} on the east dock holds {secrets.token_hex(3)} spare parts.",
                "createdAt": "2024-05-01T10:00:00+00:00",
            }
        )
        for i in range(40)
    ]
    content = ("\n".join(lines) + "\n").encode()
    answers = await asyncio.gather(
        *(post_import(server, key, "twice", "jsonl", "export.jsonl", content) for _ in range(2))
    )
    for answer in answers:
        assert answer.status_code in (200, 409), answer.text
        if answer.status_code == 409:
            assert "another import into space 'twice'" in answer.json()["message"]
    assert await spaces.space_counts(server.db, "twice") == (40, 0)
    again = await post_import(server, key, "twice", "jsonl", "export.jsonl", content)
    assert again.status_code == 200 and again.json()["imported"] == 0


async def test_an_archive_holding_a_text_no_document_can_hold_is_refused_before_it_is_all_read(
    server: RunningServer,
) -> None:
    key = await curator_of(server, "bombs")
    answer = await post_import(
        server, key, "bombs", "chatgpt", "export.zip", upload_bombs.chatgpt_import_bomb()
    )
    assert answer.status_code == 422, answer.text
    assert "more than a document can hold" in answer.json()["message"]
    assert "not read further" in answer.json()["message"]
    vault = await post_import(
        server, key, "bombs", "markdown", "vault.zip", upload_bombs.markdown_import_bomb()
    )
    assert vault.status_code == 200, vault.text
    assert any("Notes.md is over 5,065,536 characters" in s for s in vault.json()["skipped"])
    assert await spaces.space_counts(server.db, "bombs") == (0, 0)


# --- signing keys -----------------------------------------------------------------------------------


async def refused_within(bases: list[str], token: str, seconds: float) -> float:
    """How long until every server refuses ``token`` (401); fails after ``seconds``."""
    started = asyncio.get_running_loop().time()
    pending = set(bases)
    async with httpx2.AsyncClient(timeout=30) as http:
        while pending:
            for base in list(pending):
                who = await http.get(f"{base}/v1/whoami", headers={"Authorization": f"Bearer {token}"})
                assert who.status_code in (200, 401), who.text
                if who.status_code == 401:
                    pending.discard(base)
            elapsed = asyncio.get_running_loop().time() - started
            assert elapsed <= seconds, f"{sorted(pending)} still take the token after {elapsed:.1f} s"
            await asyncio.sleep(0.2)
    return asyncio.get_running_loop().time() - started


async def test_a_retired_key_is_refused_by_every_server_within_five_seconds(
    db_urls: tuple[str, str], db: Database
) -> None:
    space = await make_space(db)
    key = await make_key(db, await make_user(db), {space: Access.READ}, space)
    admin = Admin(db_urls[1])
    port = free_port()
    env = {
        "MEMORY_MCP_OAUTH_ACCESS_TOKEN_TTL_S": "60",
        "MEMORY_MCP_DOCUMENT_WORKERS": "0",
        # Two pods of one server: one public origin, so one issuer and one audience.
        "MEMORY_MCP_PUBLIC_URL": f"http://127.0.0.1:{port}",
    }
    with serve_process(db_urls[0], port=port, **env) as one, serve_process(db_urls[0], **env) as two:
        bases = [one.base, two.base]
        async with httpx2.AsyncClient(base_url=one.base, timeout=30) as http:
            flow = Flow(http)
            await flow.register()
            old = (await flow.tokens(key))["access_token"]
            async with httpx2.AsyncClient(timeout=30) as other:
                for base in bases:  # both servers have read the key and take its token
                    who = await other.get(f"{base}/v1/whoami", headers={"Authorization": f"Bearer {old}"})
                    assert who.status_code == 200, who.text
            # A rotation keeps the old key for one token lifetime, by the clock: once that has
            # passed (here: moved into the past), servers that already know the key refuse it.
            admin.ok("oauth", "keys", "rotate")
            async with db.transaction() as conn:
                await conn.execute(
                    text(
                        "UPDATE oauth_signing_keys SET retired_at = now() - interval '61 seconds' "
                        "WHERE kid = :kid"
                    ),
                    {"kid": kid_of(old)},
                )
            await refused_within(bases, old, 5.0)
            # Retired at once (a leak): refused everywhere within 5 s, and the next token is signed
            # by a key that still verifies.
            current = await flow.tokens(key)
            async with httpx2.AsyncClient(timeout=30) as other:
                for base in bases:
                    who = await other.get(
                        f"{base}/v1/whoami", headers={"Authorization": f"Bearer {current['access_token']}"}
                    )
                    assert who.status_code == 200, who.text
            leaked = kid_of(current["access_token"])
            done = admin.ok("oauth", "keys", "retire", leaked)
            assert f"retired signing key {leaked}" in done.stderr + done.stdout
            await refused_within(bases, current["access_token"], 5.0)
            assert "no signing key" in admin.refused("oauth", "keys", "retire", leaked)
            fresh = await flow.tokens(key)
            assert kid_of(fresh["access_token"]) != leaked
            async with httpx2.AsyncClient(timeout=30) as other:
                for base in bases:
                    who = await other.get(
                        f"{base}/v1/whoami", headers={"Authorization": f"Bearer {fresh['access_token']}"}
                    )
                    assert who.status_code == 200, who.text


# --- forwarded headers ------------------------------------------------------------------------------


def registrations(base: str, forwarded_for: list[str]) -> list[int]:
    body = {"client_name": "App", "redirect_uris": [REDIRECT]}
    return [
        httpx2.post(
            f"{base}/register", json=body, headers={"X-Forwarded-For": address}, timeout=30
        ).status_code
        for address in forwarded_for
    ]


def test_forwarded_for_is_believed_only_from_configured_proxies(db_urls: tuple[str, str]) -> None:
    env = {"MEMORY_MCP_OAUTH_REGISTRATIONS_PER_HOUR": "2", "MEMORY_MCP_DOCUMENT_WORKERS": "0"}
    addresses = ["203.0.113.1", "203.0.113.2", "203.0.113.3"]
    # By default no proxy is believed, loopback included: a new address per request changes nothing.
    with serve_process(db_urls[0], **env) as direct:
        assert registrations(direct.base, addresses) == [201, 201, 429]
    # Behind a configured proxy each client has its own limit, and one client still meets it.
    with serve_process(db_urls[0], **env, MEMORY_MCP_FORWARDED_ALLOW_IPS='["127.0.0.1"]') as proxied:
        assert registrations(proxied.base, addresses) == [201, 201, 201]
        assert registrations(proxied.base, ["198.51.100.7"] * 3) == [201, 201, 429]


def test_an_ipv6_client_is_counted_by_its_64_and_cannot_rotate_its_way_past_a_limit(
    db_urls: tuple[str, str],
) -> None:
    env = {
        "MEMORY_MCP_OAUTH_REGISTRATIONS_PER_HOUR": "2",
        "MEMORY_MCP_DOCUMENT_WORKERS": "0",
        "MEMORY_MCP_FORWARDED_ALLOW_IPS": '["127.0.0.1"]',
    }
    with serve_process(db_urls[0], **env) as proxied:
        # Three addresses of one /64 (a host's privacy addresses): one budget.
        assert registrations(
            proxied.base, ["2001:db8:7:1::1", "2001:db8:7:1::ab", "2001:db8:7:1:ffff::9"]
        ) == [
            201,
            201,
            429,
        ]
        # The next /64 is another client; an IPv4 address written as IPv6 is that IPv4 client.
        assert registrations(proxied.base, ["2001:db8:7:2::1"]) == [201]
        assert registrations(proxied.base, ["192.0.2.44", "::ffff:192.0.2.44", "192.0.2.44"]) == [
            201,
            201,
            429,
        ]
    # Failed authentications too: keys guessed from rotating addresses of one /64 meet the limit.
    with serve_process(db_urls[0], MEMORY_MCP_AUTH_FAILURE_LIMIT="3", **env) as proxied:
        answers = [
            httpx2.get(
                f"{proxied.base}/v1/whoami",
                headers={"Authorization": "Bearer mm_guess", "X-Forwarded-For": f"2001:db8:9:1::{n:x}"},
                timeout=30,
            ).status_code
            for n in range(1, 6)
        ]
        assert answers == [401, 401, 401, 429, 429]


# --- limits per address, across pods ---------------------------------------------------------------


async def test_registration_and_metadata_fetch_limits_hold_across_servers(
    db_urls: tuple[str, str], embedder: Embedder
) -> None:
    body = {"client_name": "App", "redirect_uris": [REDIRECT]}
    async with (
        run_server(db_urls[0], embedder, oauth_registrations_per_hour=2) as one,
        run_server(db_urls[0], embedder, oauth_registrations_per_hour=2) as two,
        httpx2.AsyncClient(timeout=30) as http,
    ):
        answers = [
            (await http.post(f"{base}/register", json=body)).status_code for base in (one.base, two.base)
        ]
        assert answers == [201, 201]
        # The third from this address is over the limit on whichever server it reaches.
        for base in (one.base, two.base):
            over = await http.post(f"{base}/register", json=body)
            assert over.status_code == 429 and over.json()["error"] == "slow_down"
        # Each client_id URL not seen before is a fetch: counted for the address on both servers.
        limit = oauth_cimd.CIMD_FETCHES_PER_HOUR
        pages = []
        for n in range(limit + 1):
            client_id = f"https://[64:ff9b::a00:{n + 1:x}]/client-{n}.json"
            base = (one.base, two.base)[n % 2]
            pages.append(
                await http.get(f"{base}/authorize", params=Flow(http, client_id=client_id).authorize_params())
            )
        assert all(p.status_code == 400 for p in pages)
        assert all("private or local address" in p.text for p in pages[:limit])
        assert "too many client metadata documents fetched for this address" in pages[limit].text
