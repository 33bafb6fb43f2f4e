"""The OAuth pages as a person meets them, in real Chromium: the sign-in page says where a key
comes from, the consent page keeps what was unticked through a refusal, every error page says what
to do next, and each follows the system's light or dark scheme.

Each test also photographs its pages, light and dark; ``OAUTH_SCREENSHOTS=docs/images`` writes
them where docs/clients.md shows them (by default they go to the test's temporary folder)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlencode

import httpx2
import pytest
from playwright.async_api import Browser, Page, Route, ViewportSize

from memory_mcp.store.access import Access
from tests.cli_support import Admin
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer
from tests.server.oauth_flow import REDIRECT, Flow, query_of
from tests.server.test_governance_e2e import MCP_HEADERS
from tests.server.test_oauth_clients import WHO, chromium

# The page's background in each scheme (oauth_pages._STYLE): the scheme really switched.
BACKGROUND = {"light": "rgb(255, 255, 255)", "dark": "rgb(23, 24, 28)"}
VIEWPORT: ViewportSize = {"width": 720, "height": 800}


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as running:
        yield running


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("OAUTH_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def photograph(page: Page, name: str, shots: Path) -> None:
    """``oauth-NAME.png`` and ``oauth-NAME-dark.png``, after checking the scheme took effect."""
    for scheme in ("light", "dark"):
        await page.emulate_media(color_scheme=scheme)
        background = await page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == BACKGROUND[scheme], (name, scheme)
        path = shots / f"oauth-{name}{'-dark' if scheme == 'dark' else ''}.png"
        await page.screenshot(path=path, full_page=True)
        assert path.stat().st_size > 5_000
    await page.emulate_media(color_scheme="light")


async def _person(server: RunningServer) -> str:
    """A Writer's key on two spaces."""
    await make_space(server.db, "notes", display_name="Notes")
    await make_space(server.db, "team", display_name="Team")
    user = await make_user(server.db, "ada")
    return await make_key(server.db, user, {"notes": Access.READ_WRITE, "team": Access.READ}, "notes")


async def _boxes(page: Page) -> dict[str, bool]:
    boxes = await page.locator('input[name="space"]').all()
    return {str(await b.get_attribute("value")): await b.is_checked() for b in boxes}


async def test_a_person_signs_in_unticks_everything_and_is_asked_again_with_nothing_ticked(
    server: RunningServer, browser: Browser, shots: Path
) -> None:
    key = await _person(server)
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        flow = Flow(http)
        await flow.register(client_name="Notebook app")
        page = await browser.new_page(viewport=VIEWPORT)
        sent_back: list[str] = []

        async def app(route: Route) -> None:  # the app's redirect endpoint
            sent_back.append(route.request.url)
            await route.fulfill(body="back in the app", content_type="text/plain")

        await page.route(f"{REDIRECT}**", app)
        await page.goto(f"{server.base}/authorize?{urlencode(flow.authorize_params())}")
        sign_in = await page.inner_text("body")
        assert "Notebook app" in sign_in and "Where to find an API key" in sign_in
        for source in ("bootstrap-key", "memory-mcp key create", "Kubernetes Secret", "mmk_"):
            assert source in sign_in, source
        await photograph(page, "sign-in", shots)

        await page.get_by_label("API key").fill("mmk_0123456789_not-a-key")
        await page.get_by_role("button", name="Continue").click()
        assert "not valid" in await page.get_by_role("alert").inner_text()
        assert "Where to find an API key" in await page.inner_text("body")  # still said after a mistake

        await page.get_by_label("API key").fill(key)
        await page.get_by_role("button", name="Continue").click()
        await page.get_by_role("button", name="Allow").wait_for()
        assert await _boxes(page) == {"notes": True, "team": True}
        await photograph(page, "consent", shots)

        for box in await page.locator('input[name="space"]').all():
            await box.uncheck()
        await page.get_by_role("button", name="Allow").click()
        alert = await page.get_by_role("alert").inner_text()
        assert "Nothing is granted" in alert and "at least one space" in alert
        # Refused with the choice kept: nothing is ticked again behind the person's back.
        assert await _boxes(page) == {"notes": False, "team": False}
        await photograph(page, "consent-nothing-chosen", shots)
        await page.get_by_role("button", name="Allow").click()  # the same choice again: refused again
        await page.get_by_role("alert").wait_for()
        assert await _boxes(page) == {"notes": False, "team": False} and sent_back == []

        await page.locator('input[name="space"][value="team"]').check()
        await page.get_by_role("button", name="Allow").click()
        await page.wait_for_url(f"{REDIRECT}?*")
        code = query_of(sent_back[0])["code"]
        tokens = await flow.exchange(code)
        assert tokens.status_code == 200, tokens.text
        me = await http.post(
            "/mcp",
            json=WHO,
            headers={**MCP_HEADERS, "Authorization": f"Bearer {tokens.json()['access_token']}"},
        )
        assert [g["space"] for g in me.json()["result"]["structuredContent"]["grants"]] == ["team"]


async def _error_page(browser: Browser, url: str) -> tuple[Page, str, str]:
    """The page at ``url``: (page, the error, what to do next)."""
    page = await browser.new_page(viewport=VIEWPORT)
    response = await page.goto(url)
    assert response is not None and response.status >= 400
    assert await page.get_by_role("heading", level=1).inner_text() == "This connection cannot continue"
    assert await page.get_by_role("heading", name="What to do next").is_visible()
    error = await page.get_by_role("alert").inner_text()
    advice = await page.locator("h2 + p").inner_text()
    return page, error, advice


async def test_every_error_page_says_what_to_do_next(
    server: RunningServer, db_urls: tuple[str, str], browser: Browser, shots: Path
) -> None:
    key = await _person(server)
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        flow = Flow(http)
        await flow.register()

        def authorize(**overrides: str | None) -> str:
            return f"{server.base}/authorize?{urlencode(flow.authorize_params(**overrides))}"

        page, error, advice = await _error_page(browser, authorize(client_id="mcl_nobody"))
        assert error == "unknown client_id"
        assert "add it again" in advice and "memory-mcp oauth clients list" in advice
        await photograph(page, "error", shots)

        # A metadata document whose host has no address (.invalid never resolves, RFC 6761).
        _, error, advice = await _error_page(browser, authorize(client_id="https://app.invalid/client.json"))
        assert error == "the client's metadata host does not resolve"
        assert "resolve and reach" in advice and "wait a minute" in advice

        _, error, advice = await _error_page(browser, authorize(client_id="https://10.1.2.3/client.json"))
        assert "private or local address" in error and "MEMORY_MCP_OAUTH_CIMD_ALLOW_LOOPBACK" in advice

        _, error, advice = await _error_page(browser, authorize(redirect_uri="https://elsewhere.example/cb"))
        assert "not one this app registered" in error
        assert "MEMORY_MCP_OAUTH_REDIRECT_HOSTS" in advice and "add it again" in advice

        revoked = Flow(http)
        await revoked.register()
        Admin(db_urls[1]).ok("oauth", "clients", "revoke", revoked.client_id)  # by whoever runs it
        _, error, advice = await _error_page(
            browser, f"{server.base}/authorize?{urlencode(revoked.authorize_params())}"
        )
        assert "revoked" in error and "whether it may connect again" in advice

        # A consent form posted from a page without this site's cookie: the stale page.
        stranger = await browser.new_page(viewport=VIEWPORT)
        await stranger.goto(authorize())
        await stranger.context.clear_cookies()
        await stranger.get_by_label("API key").fill(key)
        await stranger.get_by_role("button", name="Continue").click()
        await stranger.get_by_role("heading", name="What to do next").wait_for()
        advice = await stranger.locator("h2 + p").inner_text()
        assert "came from another site" in await stranger.get_by_role("alert").inner_text()
        assert "Start again from the app" in advice and "cookies" in advice

        # A key whose only space was deleted grants nothing: what the person can ask for.
        admin = Admin(db_urls[1])
        admin.ok("space", "create", "gone")
        empty = await make_key(server.db, await make_user(server.db, "bo"), {"gone": Access.READ})
        admin.ok("space", "delete", "gone", "--yes")
        bare = await browser.new_page(viewport=VIEWPORT)
        await bare.goto(authorize())
        await bare.get_by_label("API key").fill(empty)
        await bare.get_by_role("button", name="Continue").click()
        await bare.get_by_role("heading", name="What to do next").wait_for()
        assert "grants no space" in await bare.get_by_role("alert").inner_text()
        assert "another key" in await bare.locator("h2 + p").inner_text()
