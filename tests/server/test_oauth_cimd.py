"""Clients known by a Client ID Metadata Document: fetched over verified https from a loopback
server with its own CA (SSL_CERT_FILE), with every SSRF guard and limit refused through HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from memory_mcp.embedder.client import Embedder
from memory_mcp.store.access import Access
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer, run_server
from tests.server.loopback_tls import Certificates, HttpsServer, make_certificates, serve_https
from tests.server.oauth_flow import REDIRECT, Flow

DOC_PATH = "/oauth/client.json"


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    return make_certificates(tmp_path)


@pytest.fixture
def documents(certificates: Certificates, monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpsServer]:
    monkeypatch.setenv("SSL_CERT_FILE", str(certificates.ca))
    with serve_https(certificates) as https:
        yield https


@pytest.fixture
async def loopback_allowed(db_urls: tuple[str, str], embedder: Embedder) -> AsyncIterator[RunningServer]:
    async with run_server(
        db_urls[0], embedder, oauth_cimd_allow_loopback=True, oauth_cimd_max_bytes=1024
    ) as running:
        yield running


def publish(https: HttpsServer, path: str = DOC_PATH, **fields: Any) -> str:
    client_id = https.base + path
    document = {"client_id": client_id, "client_name": "Metadata app", "redirect_uris": [REDIRECT], **fields}
    https.documents[path] = json.dumps(document).encode()
    return client_id


async def _authorize(server: RunningServer, client_id: str, **overrides: str) -> httpx2.Response:
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        flow = Flow(http, client_id=client_id)
        return await http.get("/authorize", params=flow.authorize_params(**overrides))


async def test_a_metadata_document_client_signs_in_and_gets_tokens_and_is_cached(
    loopback_allowed: RunningServer, documents: HttpsServer
) -> None:
    client_id = publish(documents)
    await make_space(loopback_allowed.db, "notes")
    key = await make_key(
        loopback_allowed.db, await make_user(loopback_allowed.db), {"notes": Access.READ}, "notes"
    )
    async with httpx2.AsyncClient(base_url=loopback_allowed.base, timeout=30) as http:
        flow = Flow(http, client_id=client_id)
        consent = await flow.sign_in(key)
        assert consent.status_code == 200 and "Metadata app" in consent.text
        tokens = await flow.tokens(key)
        assert tokens["access_token"].count(".") == 2
    assert documents.requests == [DOC_PATH]  # fetched once, then taken from the database


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"redirect_uris": ["http://127.0.0.1:9/elsewhere"]}, "not one this app registered"),
        ({"client_id": "https://localhost/another.json"}, "names another client_id"),
        ({"client_name": "x" * 2000}, "over 1024 bytes"),
        ({"redirect_uris": ["http://example.com/cb"]}, "must be https"),
        ({"token_endpoint_auth_method": "private_key_jwt"}, "public client"),
    ],
)
async def test_a_document_that_does_not_fit_gets_an_error_page(
    loopback_allowed: RunningServer, documents: HttpsServer, fields: dict[str, Any], problem: str
) -> None:
    refused = await _authorize(loopback_allowed, publish(documents, **fields))
    assert refused.status_code == 400 and "location" not in refused.headers
    assert problem in refused.text


async def test_private_addresses_are_refused_before_any_connection(
    server: RunningServer, loopback_allowed: RunningServer, documents: HttpsServer
) -> None:
    client_id = publish(documents)
    for target, client in (
        (server, client_id),  # loopback, with the setting off (the default)
        (loopback_allowed, "https://10.1.2.3/client.json"),
        (loopback_allowed, "https://169.254.169.254/latest/meta-data.json"),
        (loopback_allowed, "https://[fd00::1]/client.json"),
        (loopback_allowed, "https://192.168.0.1/client.json"),
    ):
        refused = await _authorize(target, client)
        assert refused.status_code == 400 and "private or local address" in refused.text, client
    assert documents.requests == []


async def test_a_certificate_outside_the_trust_store_is_refused(
    loopback_allowed: RunningServer, certificates: Certificates, tmp_path: Path
) -> None:
    with serve_https(certificates) as https:  # SSL_CERT_FILE not set: the CA is unknown
        refused = await _authorize(loopback_allowed, publish(https))
    assert refused.status_code == 400 and "verified https" in refused.text


async def test_a_missing_document_or_a_plain_http_client_id_is_refused(
    loopback_allowed: RunningServer, documents: HttpsServer
) -> None:
    missing = await _authorize(loopback_allowed, documents.base + "/oauth/none.json")
    assert missing.status_code == 400 and "answered 404" in missing.text
    plain = await _authorize(loopback_allowed, "http://localhost/client.json")
    assert plain.status_code == 400 and "unknown client_id" in plain.text
