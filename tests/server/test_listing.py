"""What a listing's reviewer checks, through the real MCP client over real HTTP: every tool titled,
annotated and named within limits, and a lean ``tools/list``."""

from __future__ import annotations

import json
import re

from mcp.types import Tool

from tests.factories import make_key, make_space, make_user
from tests.server.conftest import APP_ONLY_TOOLS, RunningServer, apps_session, mcp_session

# (readOnlyHint, destructiveHint, idempotentHint, openWorldHint) as each tool's effect has them
# (docs/clients.md, "Tool annotations"); every hint is set, none left to its default.
HINTS = {
    "search_memory": (True, False, True, False),  # counts recalls, changes no memory
    "add_memory": (False, True, False, False),  # forgetting retires; a save may supersede
    "listDocuments": (True, False, True, False),
    "getDocument": (True, False, True, False),
    "listMemories": (True, False, True, False),
    "listSpaces": (True, False, True, False),
    "whoAmI": (True, False, True, False),
    "select-space": (False, False, True, False),  # a preference of the key
    "set-active-space": (False, False, True, False),
    "guided-save": (True, False, True, False),  # opens a draft; nothing is saved until submitted
    "save-memory": (False, True, True, False),  # a near-restatement supersedes the live memory
    "upload-file": (True, False, True, False),
    "memory-graph": (True, False, True, False),
    "fetch-graph-data": (True, False, True, False),
    "prepare-file-upload": (False, False, False, False),  # mints a short-lived token
}
# The connectors directory's limit, and the characters the spec allows in a tool name.
MAX_NAME = 64
NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
TOOLS_LIST_BUDGET = 8000  # characters of JSON for a 2026-07-28 client without MCP Apps


def _json(tools: list[Tool]) -> str:
    return json.dumps(
        [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools], separators=(",", ":")
    )


async def _reader_key(server: RunningServer) -> str:
    space = await make_space(server.db)
    return await make_key(server.db, await make_user(server.db), {space: "Read"}, space)


async def test_every_tool_is_titled_annotated_and_named_within_limits_and_the_plain_list_is_lean(
    server: RunningServer,
) -> None:
    key = await _reader_key(server)
    async with apps_session(server, key) as s:
        every = (await s.client.list_tools()).tools
    async with mcp_session(server, key) as s:
        assert s.client.protocol_version == "2026-07-28"
        plain = (await s.client.list_tools()).tools
    assert {t.name for t in every} == set(HINTS)
    assert {t.name for t in plain} == set(HINTS) - APP_ONLY_TOOLS
    for tool in every:
        assert len(tool.name) <= MAX_NAME and NAME.fullmatch(tool.name), tool.name
        assert tool.title and tool.title[0].isupper() and len(tool.title) <= 40, tool.name
        hints = tool.annotations
        assert hints is not None, tool.name
        got = (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint, hints.open_world_hint)
        assert got == HINTS[tool.name], tool.name
    assert len({t.title for t in every}) == len(every)  # no two tools look alike in a host's list
    size = len(_json(plain))
    assert size <= TOOLS_LIST_BUDGET, size
    # What a model needs is whole in the lean list: every description, every argument with its
    # description and limits, and the names of every structured result's fields.
    full = {t.name: t for t in every}
    for tool in plain:
        assert tool.description and tool.description == full[tool.name].description
        assert tool.input_schema == full[tool.name].input_schema
        for name, prop in tool.input_schema.get("properties", {}).items():
            assert "type" in prop or "enum" in prop, (tool.name, name)
    search = next(t for t in plain if t.name == "search_memory")
    assert search.output_schema is not None
    assert {"results", "count", "profile"} <= set(search.output_schema["properties"])
