"""OAuth clients nobody here wrote, against `memory-mcp serve` processes: the mcp SDK's
``OAuthClientProvider`` (discovery, registration or a metadata document, authorize, token,
refresh), with the sign-in and consent pages filled in by a person's real browser (Chromium)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from playwright.async_api import Browser, Page, async_playwright
from pydantic import AnyUrl

from memory_mcp.store import apikeys
from memory_mcp.store.access import Access
from memory_mcp.store.apikeys import GrantSpec
from memory_mcp.store.db import Database
from tests.cli_support import Admin
from tests.factories import make_space, make_user
from tests.server.conftest import free_port, serve_process
from tests.server.loopback_tls import make_certificates, serve_https
from tests.server.oauth_flow import Flow
from tests.server.test_governance_e2e import MCP_HEADERS

BROWSER_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
WHO = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoAmI", "arguments": {}}}
KEY_NAME = "laptop"


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path="/usr/bin/chromium", args=BROWSER_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


class Callback:
    """The app's loopback redirect endpoint: a real listener that hands the code to the app."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/callback"
        self.received: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            target = (await reader.readline()).decode().split(" ")[1]
            query = {k: v[0] for k, v in parse_qs(urlsplit(target).query).items()}
            if not self.received.done():
                self.received.set_result(query)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\nConnection: close\r\n\r\nDone.\n"
            )
            await writer.drain()
            writer.close()

        self.server = await asyncio.start_server(answer, "127.0.0.1", self.port)

    async def result(self) -> AuthorizationCodeResult:
        query = await asyncio.wait_for(self.received, 60)
        self.received = asyncio.get_running_loop().create_future()
        return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))


class Person:
    """Someone at the browser: pastes their key, keeps some spaces, presses Allow."""

    def __init__(self, page: Page, api_key: str, keep: set[str]) -> None:
        self.page = page
        self.api_key = api_key
        self.keep = keep
        self.consent_text = ""

    async def open(self, url: str) -> None:
        await self.page.goto(url)
        await self.page.get_by_label("API key").fill(self.api_key)
        await self.page.get_by_role("button", name="Continue").click()
        await self.page.get_by_role("button", name="Allow").wait_for()
        self.consent_text = await self.page.inner_text("body")
        for box in await self.page.locator('input[name="space"]').all():
            assert await box.is_checked()
            if await box.get_attribute("value") not in self.keep:
                await box.uncheck()
        await self.page.get_by_role("button", name="Allow").click()
        await self.page.wait_for_url("http://127.0.0.1:*/callback?*")


class Storage:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


async def _arrange(url: str) -> str:
    """Two spaces and a person with a command-line key on both; returns the key."""
    db = Database(url, pool_size=2)
    try:
        await make_space(db, "notes", display_name="Notes")
        await make_space(db, "team", display_name="Team")
        user = await make_user(db, "ada")
        _, key = await apikeys.create_key(
            db,
            KEY_NAME,
            user,
            [GrantSpec("notes", Access.READ_WRITE), GrantSpec("team", Access.READ)],
            "notes",
            managed_by="cli",
        )
        return key
    finally:
        await db.close()


def _metadata(callback: Callback) -> OAuthClientMetadata:
    return OAuthClientMetadata(
        client_name="SDK test app",
        redirect_uris=[AnyUrl(callback.url)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )


async def _use_the_tools(base: str, provider: OAuthClientProvider, storage: Storage) -> dict[str, Any]:
    """tools/list, a save and a search in the kept space, whoAmI; then a refresh, by the SDK."""
    async with (
        httpx2.AsyncClient(auth=provider, timeout=60) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,
    ):
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"search_memory", "add_memory", "whoAmI", "listSpaces"} <= tools
        saved = await client.call_tool("add_memory", {"content": "The release code word is ZEBRA-42."})
        assert not saved.is_error, saved.content
        found = await client.call_tool("search_memory", {"keyword": "ZEBRA-42"})
        assert not found.is_error and "ZEBRA-42" in json.dumps(found.structured_content)
        who = await client.call_tool("whoAmI", {})
        assert not who.is_error and who.structured_content is not None
        # The access token runs out (as if an hour had passed): the SDK refreshes by itself.
        assert storage.tokens is not None
        before = storage.tokens
        provider.context.token_expiry_time = time.time() - 1
        again = await client.call_tool("whoAmI", {})
        assert not again.is_error
        assert storage.tokens.access_token != before.access_token
        assert storage.tokens.refresh_token != before.refresh_token
        return who.structured_content


async def test_the_sdk_client_registers_signs_in_in_a_browser_and_works_until_the_key_is_revoked(
    db_urls: tuple[str, str],
) -> None:
    key = await _arrange(db_urls[0])
    callback = Callback()
    await callback.start()
    storage = Storage()
    with serve_process(db_urls[0]) as served:
        base = served.base
        async with chromium() as browser:
            person = Person(await browser.new_page(), key, keep={"notes"})
            provider = OAuthClientProvider(
                server_url=f"{base}/mcp",
                client_metadata=_metadata(callback),
                storage=storage,
                redirect_handler=person.open,
                callback_handler=callback.result,
            )
            who = await _use_the_tools(base, provider, storage)
        assert storage.client is not None and storage.client.client_id.startswith("mcl_")  # registered (DCR)
        assert "SDK test app" in person.consent_text and f"127.0.0.1:{callback.port}" in person.consent_text
        assert (
            "Notes (notes): ReadWrite" in person.consent_text and "Team (team): Read" in person.consent_text
        )
        assert [g["space"] for g in who["grants"]] == ["notes"]  # team was unticked
        assert who["key"]["name"] == KEY_NAME

        Admin(db_urls[1]).ok("key", "revoke", KEY_NAME)
        assert storage.tokens is not None and storage.tokens.refresh_token is not None
        refused = httpx2.post(
            f"{base}/mcp",
            json=WHO,
            headers={**MCP_HEADERS, "Authorization": f"Bearer {storage.tokens.access_token}"},
        )
        assert refused.status_code == 401 and 'error="invalid_token"' in refused.headers["www-authenticate"]
        refresh = httpx2.post(
            f"{base}/token",
            data={
                "grant_type": "refresh_token",
                "refresh_token": storage.tokens.refresh_token,
                "client_id": storage.client.client_id,
            },
        )
        assert refresh.status_code == 400 and refresh.json()["error"] == "invalid_grant"
    assert callback.server is not None
    callback.server.close()


async def test_the_sdk_client_known_by_its_metadata_document(
    db_urls: tuple[str, str], tmp_path: Path
) -> None:
    key = await _arrange(db_urls[0])
    callback = Callback()
    await callback.start()
    storage = Storage()
    certificates = make_certificates(tmp_path)
    with serve_https(certificates) as documents:
        client_id = f"{documents.base}/oauth/sdk-client.json"
        documents.documents["/oauth/sdk-client.json"] = json.dumps(
            {
                "client_id": client_id,
                "client_name": "Metadata SDK app",
                "redirect_uris": [callback.url],
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "none",
            }
        ).encode()
        with serve_process(
            db_urls[0], SSL_CERT_FILE=str(certificates.ca), MEMORY_MCP_OAUTH_CIMD_ALLOW_LOOPBACK="true"
        ) as served:
            base = served.base
            async with chromium() as browser:
                person = Person(await browser.new_page(), key, keep={"notes", "team"})
                provider = OAuthClientProvider(
                    server_url=f"{base}/mcp",
                    client_metadata=_metadata(callback),
                    storage=storage,
                    redirect_handler=person.open,
                    callback_handler=callback.result,
                    client_metadata_url=client_id,
                )
                who = await _use_the_tools(base, provider, storage)
    assert storage.client is not None and storage.client.client_id == client_id
    assert "Metadata SDK app" in person.consent_text
    assert [g["space"] for g in who["grants"]] == ["notes", "team"]
    assert documents.requests == ["/oauth/sdk-client.json"]
    assert callback.server is not None
    callback.server.close()


async def test_a_flow_begun_on_one_server_finishes_on_another(db_urls: tuple[str, str]) -> None:
    key = await _arrange(db_urls[0])
    first, second = free_port(), free_port()
    public = f"http://127.0.0.1:{first}"  # both behind one public address, as pods behind an ingress
    with (
        serve_process(db_urls[0], port=first, MEMORY_MCP_PUBLIC_URL=public) as served_one,
        serve_process(db_urls[0], port=second, MEMORY_MCP_PUBLIC_URL=public) as served_two,
    ):
        one, two = served_one.base, served_two.base
        async with (
            httpx2.AsyncClient(base_url=one, timeout=30) as on_one,
            httpx2.AsyncClient(base_url=two, timeout=30) as on_two,
        ):
            flow = Flow(on_one)
            await flow.register()
            code = await flow.code(key, ["team"])
            exchanged = await Flow(on_two, client_id=flow.client_id, verifier=flow.verifier).exchange(code)
            assert exchanged.status_code == 200, exchanged.text
            tokens = exchanged.json()
            who = await on_two.post(
                "/mcp", json=WHO, headers={**MCP_HEADERS, "Authorization": f"Bearer {tokens['access_token']}"}
            )
            assert who.status_code == 200, who.text
            assert [g["space"] for g in who.json()["result"]["structuredContent"]["grants"]] == ["team"]
            refreshed = await Flow(on_one, client_id=flow.client_id).refresh(tokens["refresh_token"])
            assert refreshed.status_code == 200
            reused = await Flow(on_two, client_id=flow.client_id).refresh(tokens["refresh_token"])
            assert reused.json()["error"] == "invalid_grant"
