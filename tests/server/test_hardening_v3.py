"""Hardening, third round, through HTTP: secrets that hide, every stored text scanned, quotas under
concurrency, upload bombs and truncated bodies, authorisation before the body is read."""

from __future__ import annotations

import random
from typing import Any

import httpx2

from bench import secret_corpus_hiding as hiding
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer


async def writer_key(server: RunningServer) -> tuple[str, str]:
    space = await make_space(server.db)
    return space, await make_key(server.db, await make_user(server.db), {space: "ReadWrite"}, space)


def one_sample_per_family() -> list[str]:
    """The first sentence of every family of hidden credentials, with a fresh secret in it."""
    rng = random.Random(27)
    return [templates[0].format(s=make(rng)) for _, make, templates in hiding.POSITIVES]


async def test_hidden_credentials_are_refused_and_notes_about_them_are_saved(server: RunningServer) -> None:
    _, key = await writer_key(server)
    async with httpx2.AsyncClient(base_url=server.base, headers={"Authorization": f"Bearer {key}"}) as http:
        for text in one_sample_per_family():
            refused = await http.post("/v1/memories", json={"content": text})
            assert refused.status_code == 422, (text, refused.text)
            body: dict[str, Any] = refused.json()
            assert body["error"] == "SecretRefused" and body["field"] == "content", body
        for text in hiding.NEGATIVES[:12]:
            saved = await http.post("/v1/memories", json={"content": text})
            assert saved.status_code == 200, (text, saved.text)
        listed = (await http.get("/v1/memories", params={"limit": 50})).json()
        assert len(listed["memories"]) == 12
