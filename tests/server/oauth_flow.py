"""The OAuth flow over plain HTTP, as a browser and an app would drive it, for tests that need a
token quickly or want to break one step (the browser-driven flow is in test_oauth_clients.py)."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from dataclasses import dataclass
from html import unescape
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2

REDIRECT = "http://127.0.0.1:9/callback"


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def hidden_fields(html: str) -> dict[str, str]:
    return {
        unescape(m.group(1)): unescape(m.group(2))
        for m in re.finditer(r'<input type="hidden" name="([^"]*)" value="([^"]*)">', html)
    }


def query_of(location: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


@dataclass
class Flow:
    """One app's registration and one person's consent against a running server."""

    http: httpx2.AsyncClient  # base_url = the server; keeps the CSRF cookie like a browser
    client_id: str = ""
    redirect_uri: str = REDIRECT
    verifier: str = ""

    async def register(self, **metadata: Any) -> dict[str, Any]:
        body = {"client_name": "Test app", "redirect_uris": [self.redirect_uri], **metadata}
        response = await self.http.post("/register", json=body)
        assert response.status_code == 201, response.text
        answer: dict[str, Any] = response.json()
        self.client_id = answer["client_id"]
        return answer

    def authorize_params(self, **overrides: str | None) -> dict[str, str]:
        self.verifier, challenge = pkce()
        params: dict[str, str | None] = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": self.redirect_uri,
            "state": "st-" + secrets.token_hex(4),
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "resource": f"{self.http.base_url}".rstrip("/") + "/mcp",
            **overrides,
        }
        return {k: v for k, v in params.items() if v is not None}

    async def sign_in(self, api_key: str, **overrides: str | None) -> httpx2.Response:
        """GET /authorize, then POST the key: the consent page (or whatever came instead)."""
        page = await self.http.get("/authorize", params=self.authorize_params(**overrides))
        assert page.status_code == 200, page.text
        fields = hidden_fields(page.text)
        return await self.http.post("/authorize", data={**fields, "api_key": api_key})

    async def consent(
        self, consent_page: httpx2.Response, spaces: list[str] | None = None, decision: str = "allow"
    ) -> httpx2.Response:
        fields = hidden_fields(consent_page.text)
        offered = re.findall(r'name="space" value="([^"]*)" checked', consent_page.text)
        data: dict[str, Any] = {
            **fields,
            "decision": decision,
            "space": offered if spaces is None else spaces,
        }
        return await self.http.post("/authorize/consent", data=data)

    async def code(self, api_key: str, spaces: list[str] | None = None, **overrides: str | None) -> str:
        consent = await self.consent(await self.sign_in(api_key, **overrides), spaces)
        assert consent.status_code == 303, consent.text
        return query_of(consent.headers["location"])["code"]

    async def exchange(self, code: str, **overrides: str | None) -> httpx2.Response:
        data = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_uri,
            "client_id": self.client_id,
            "code_verifier": self.verifier,
            **overrides,
        }
        return await self.http.post("/token", data={k: v for k, v in data.items() if v is not None})

    async def tokens(self, api_key: str, spaces: list[str] | None = None) -> dict[str, Any]:
        response = await self.exchange(await self.code(api_key, spaces))
        assert response.status_code == 200, response.text
        tokens: dict[str, Any] = response.json()
        return tokens

    async def refresh(self, refresh_token: str) -> httpx2.Response:
        data = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": self.client_id}
        return await self.http.post("/token", data=data)
