"""What reading an import costs: another tool's export is read a conversation at a time, within a
CPU and a memory budget (`MEMORY_MCP_MAX_IMPORT_*`), through `memory-mcp import` and
`POST /v1/spaces/{key}/import` as people use them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx2
import pytest

from memory_mcp.store import spaces
from memory_mcp.store.access import Role
from memory_mcp.store.db import Database
from tests.cli_support import Admin
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import run_server

MIB = 1024 * 1024
_WORDS = ["the", "boiler", "in", "the", "east", "wing", "is", "serviced", "every", "september", "by", "the"]


def conversation(index: int, user_text: str, padding: int = 0) -> dict[str, Any]:
    """A ChatGPT conversation of one user turn and one reply; ``padding`` characters of message
    metadata that the import reads past and keeps nothing of (real exports carry much of it)."""
    start = 1_700_000_000 + index * 60

    def node(node_id: str, parent: str | None, role: str, text: str) -> dict[str, Any]:
        return {
            "id": node_id,
            "parent": parent,
            "children": [],
            "message": {
                "author": {"role": role},
                "create_time": start + (role == "assistant"),
                "content": {"content_type": "text", "parts": [text]},
                "metadata": {"padding": "x" * padding},
            },
        }

    return {
        "title": f"Conversation {index}",
        "id": f"c{index}",
        "create_time": start,
        "current_node": "a",
        "mapping": {"u": node("u", None, "user", user_text), "a": node("a", "u", "assistant", "Noted.")},
    }


def prose(index: int, words: int) -> str:
    return f"Note {index}: " + " ".join(_WORDS[(index + i) % len(_WORDS)] for i in range(words)) + "."


def padded_export(path: Path, conversations: int, padding: int) -> int:
    """An export of small conversations in large message metadata; its size."""
    items = (json.dumps(conversation(i, prose(i, 12), padding)) for i in range(conversations))
    path.write_text("[" + ",".join(items) + "]")
    return path.stat().st_size


def cost_line(stderr: str) -> tuple[int, int]:
    """Bytes read and the most held, as `memory-mcp import` reports them."""
    found = re.search(r"read ([\d,]+) bytes in [\d.]+ s of CPU, holding at most ([\d,]+) bytes", stderr)
    assert found is not None, stderr
    return int(found.group(1).replace(",", "")), int(found.group(2).replace(",", ""))


@pytest.fixture
def admin(db_urls: tuple[str, str]) -> Admin:
    return Admin(db_urls[1])


async def test_a_large_export_is_read_a_conversation_at_a_time_within_its_memory_budget(
    db_urls: tuple[str, str], db: Database, admin: Admin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await make_space(db, "mine")
    await make_user(db, "cura", Role.WRITER)
    curator = await make_key(db, "cura", {"mine": "Curate"})
    export = tmp_path / "conversations.json"
    size = padded_export(export, 80, 150_000)  # 24 MB of JSON, 80 short conversations
    budget = 8 * MIB

    monkeypatch.setenv("MEMORY_MCP_MAX_IMPORT_MEMORY_BYTES", str(budget))
    dry = admin.ok("import", "--from", "chatgpt", str(export), "--space", "mine", "--dry-run")
    assert "dry run: would import 80 memories and 80 documents into 'mine'" in dry.stderr
    read, held = cost_line(dry.stderr)
    # All of it read, never more than a few conversations' worth held (the whole file is 24 MB).
    assert read == size
    assert held <= budget < size // 2
    assert held < size // 4

    async with (
        run_server(db_urls[0], None, max_import_memory_bytes=budget) as server,
        httpx2.AsyncClient(base_url=server.base, timeout=120) as http,
    ):
        answer = await http.post(
            "/v1/spaces/mine/import",
            params={"from": "chatgpt", "dryRun": "true"},
            files={"file": ("conversations.json", export.read_bytes())},
            headers={"Authorization": f"Bearer {curator}"},
        )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["imported"], body["documents"]) == (80, 80)
    assert body["cost"]["readBytes"] == size
    assert 0 < body["cost"]["peakBytes"] <= budget
    assert body["cost"]["cpuSeconds"] > 0


async def test_an_export_over_the_budget_is_refused_and_nothing_is_imported(
    db_urls: tuple[str, str], db: Database, tmp_path: Path
) -> None:
    await make_space(db, "mine")
    await make_user(db, "cura", Role.WRITER)
    curator = await make_key(db, "cura", {"mine": "Curate"})
    export = tmp_path / "conversations.json"
    # 400 conversations of 300 words each: their records alone hold several MB.
    export.write_text(json.dumps([conversation(i, prose(i, 300)) for i in range(400)]))

    async def post(**limits: Any) -> httpx2.Response:
        async with (
            run_server(db_urls[0], None, **limits) as server,
            httpx2.AsyncClient(base_url=server.base, timeout=120) as http,
        ):
            return await http.post(
                "/v1/spaces/mine/import",
                params={"from": "chatgpt"},
                files={"file": ("conversations.json", export.read_bytes())},
                headers={"Authorization": f"Bearer {curator}"},
            )

    memory = await post(max_import_memory_bytes=2 * MIB)
    assert memory.status_code == 413, memory.text
    assert memory.json()["error"] == "ImportOverBudget"
    assert memory.json()["message"].startswith(
        "reading conversations.json would hold more than this server's 2 MiB for one import (by byte "
    )
    assert "nothing was imported" in memory.json()["message"]

    cpu = await post(max_import_cpu_seconds=0.001)
    assert cpu.status_code == 413, cpu.text
    assert cpu.json()["error"] == "ImportOverBudget"
    assert re.match(
        r"reading conversations\.json took more than this server's 0\.001 s of CPU for one import "
        r"\([\d.]+ s, by byte [\d,]+\); nothing was imported",
        cpu.json()["message"],
    ), cpu.text
    assert await spaces.space_counts(db, "mine") == (0, 0)


async def test_reading_stops_at_the_budget_without_reading_the_rest(
    db: Database, admin: Admin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await make_space(db, "mine")
    export = tmp_path / "conversations.json"
    good = ",".join(json.dumps(conversation(i, prose(i, 300))) for i in range(3000))  # 6 MB
    # What follows the conversations is not JSON: a reading that got there would say so.
    export.write_text("[" + good + ", {oops" + " " * 5_000_000 + "]")
    monkeypatch.setenv("MEMORY_MCP_MAX_IMPORT_MEMORY_BYTES", str(2 * MIB))

    refused = admin.refused("import", "--from", "chatgpt", str(export), "--space", "mine")
    assert "error: reading conversations.json would hold more than this server's 2 MiB" in refused
    assert "not valid JSON" not in refused
    stopped_at = int(re.search(r"by byte ([\d,]+)", refused).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert stopped_at < len(good) < export.stat().st_size
    assert await spaces.space_counts(db, "mine") == (0, 0)


async def test_bad_or_deeply_nested_json_is_refused_with_its_file_and_byte(
    db: Database, admin: Admin, tmp_path: Path
) -> None:
    await make_space(db, "mine")
    export = tmp_path / "conversations.json"
    first = json.dumps(conversation(1, prose(1, 12)))
    export.write_text(f"[{first}, {first} {first}]")
    refused = admin.refused("import", "--from", "chatgpt", str(export), "--space", "mine")
    at = 1 + len(first) + 2 + len(first) + 1  # the second conversation ends without a comma
    assert (
        f"error: file: conversations.json is not valid JSON (Expecting ',' delimiter at byte {at:,})"
        in refused
    )

    export.write_text("[" * 100_000 + "]" * 100_000)
    refused = admin.refused("import", "--from", "chatgpt", str(export), "--space", "mine")
    assert "error: file: conversations.json is nested too deeply to read (by byte 1)" in refused
    assert "Traceback" not in refused and "RecursionError" not in refused
