"""The MCP Apps surface through a real MCP client: launchers, app-only tools and their refusals, the
ui:// resources and their metadata, the text a client without Apps gets, and a current build."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import httpx2
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID

from memory_mcp.store.access import Role
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import APP_ONLY_TOOLS, RunningServer, apps_session, mcp_session

LAUNCHERS = {"select-space", "guided-save", "upload-file", "memory-graph"}
APP_ONLY = APP_ONLY_TOOLS
WIDGETS_SRC = Path(__file__).parents[2] / "server" / "widgets"
BUILT = Path(__file__).parents[2] / "server" / "src" / "memory_mcp" / "server" / "widgets"


async def keys(server: RunningServer) -> dict[str, str]:
    for space in ("alpha", "beta", "hidden"):
        await make_space(server.db, space)
    writer = await make_user(server.db, "wes")
    reader = await make_user(server.db, "rhea", role=Role.READER)
    return {
        "writer": await make_key(server.db, writer, {"alpha": "ReadWrite", "beta": "Read"}, "alpha"),
        "reader": await make_key(server.db, reader, {"alpha": "ReadWrite"}, "alpha"),
    }


async def test_tools_and_resources_carry_the_apps_metadata(server: RunningServer) -> None:
    k = await keys(server)
    async with apps_session(server, k["writer"]) as s:
        tools = {t.name: t for t in (await s.client.list_tools()).tools}
        resources = {str(r.uri): r for r in (await s.client.list_resources()).resources}
        assert EXTENSION_ID in (s.client.server_capabilities.extensions or {})  # type: ignore[union-attr]
        read = {
            uri: (await s.client.read_resource(uri)).contents[0]
            for uri in resources
            if uri.startswith("ui://")
        }
    for name in LAUNCHERS:
        ui = (tools[name].meta or {})["ui"]
        assert ui["resourceUri"] == f"ui://memory-mcp/{name}" and "visibility" not in ui  # the model sees it
    for name in APP_ONLY:
        assert (tools[name].meta or {})["ui"]["visibility"] == ["app"], name
    # What the Apps tools add to tools/list for a client with MCP Apps (6.0k characters measured,
    # closed input schemas and every annotation spelled out included): short descriptions.
    widgets = [t for t in tools.values() if "ui" in (t.meta or {})]
    assert (
        len(json.dumps([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in widgets]))
        < 6_500
    )
    assert {uri for uri in resources if uri.startswith("ui://")} == {
        f"ui://memory-mcp/{n}" for n in LAUNCHERS
    }
    for uri, content in read.items():
        assert resources[uri].mime_type == APP_MIME_TYPE and content.mime_type == APP_MIME_TYPE
        html = content.text  # type: ignore[union-attr]
        assert html.startswith("<!doctype html>") and '<script type="module">' in html
        # Self-contained: nothing is fetched from anywhere when the widget loads.
        assert " src=" not in html and "<link" not in html and "https://cdn" not in html
        csp = (content.meta or {})["ui"]["csp"]
        expected = [server.base] if uri.endswith("/upload-file") else []
        assert csp["connectDomains"] == expected, uri


async def test_launchers_tell_a_client_without_apps_what_to_call(server: RunningServer) -> None:
    k = await keys(server)
    async with mcp_session(server, k["writer"]) as s:
        picker = await s.call("select-space")
        draft = await s.call("guided-save", prefill="Ship on Tuesdays.")
        upload = await s.call("upload-file")
        graph = await s.call("memory-graph")
    assert "call select-space with `space`" in picker.content[0].text  # type: ignore[union-attr]
    assert "'alpha'" in picker.content[0].text and "'beta'" in picker.content[0].text  # type: ignore[union-attr]
    assert "call add_memory" in draft.content[0].text and "'alpha'" in draft.content[0].text  # type: ignore[union-attr]
    assert "'beta'" not in draft.content[0].text  # type: ignore[union-attr]  # read-only there
    assert f"{server.base}/v1/documents" in upload.content[0].text  # type: ignore[union-attr]
    assert "listDocuments" in graph.content[0].text  # type: ignore[union-attr]
    assert draft.structured_content == {
        "prefill": "Ship on Tuesdays.",
        "spaces": draft.structured_content["spaces"],  # type: ignore[index]
        "activeSpace": "alpha",
        "maxContent": 2000,
    }
    assert [sp["key"] for sp in draft.structured_content["spaces"]] == ["alpha"]  # type: ignore[index]
    async with apps_session(server, k["writer"]) as s:
        shown = await s.call("select-space")
    assert shown.content[0].text == "Showing the space picker: 2 spaces, active 'alpha'."  # type: ignore[union-attr]


async def test_select_space_switches_directly_or_through_the_picker(server: RunningServer) -> None:
    k = await keys(server)
    async with mcp_session(server, k["writer"]) as s:
        direct = await s.ok("select-space", space="beta")
        assert direct == {"activeSpace": "beta", "access": "Read", "message": direct["message"]}  # as before
        assert (await s.ok("whoAmI"))["activeSpace"] == "beta"
        picked = await s.ok("set-active-space", space="alpha")
        assert picked["activeSpace"] == "alpha" and (await s.ok("whoAmI"))["activeSpace"] == "alpha"
        hidden = await s.error("set-active-space", space="hidden")
        missing = await s.error("set-active-space", space="no-such-space")
    # A space without a grant answers exactly like one that does not exist.
    assert hidden.replace("hidden", "X") == missing.replace("no-such-space", "X")
    assert "not found" in hidden


async def test_save_memory_saves_where_chosen_and_refuses_like_add_memory(server: RunningServer) -> None:
    k = await keys(server)
    async with mcp_session(server, k["writer"]) as s:
        saved = await s.ok(
            "save-memory", content="The VPN rotates keys monthly.", space="alpha", category="ops"
        )
        assert (
            saved["status"] == "saved" and saved["space"] == "alpha" and saved["memory"]["category"] == "ops"
        )
        again = await s.ok("save-memory", content="The VPN rotates keys monthly.", space="alpha")
        assert again["status"] == "already_exists"
        read_only = await s.error("save-memory", content="Not allowed.", space="beta")
        hidden = await s.error("save-memory", content="Not allowed.", space="hidden")
        missing = await s.error("save-memory", content="Not allowed.", space="no-such-space")
        found = await s.ok("search_memory", keyword="VPN", containerTag="alpha", includeProfile=False)
    assert "read-only" in read_only or "Read" in read_only
    assert hidden.replace("hidden", "X") == missing.replace("no-such-space", "X")
    assert found["count"] == 1
    async with mcp_session(server, k["reader"]) as s:
        refused = await s.error("save-memory", content="A reader's note.", space="alpha")
        form = await s.ok("guided-save")
        nothing = await s.ok("search_memory", keyword="reader", containerTag="alpha", includeProfile=False)
    assert "read" in refused.lower() and nothing["count"] == 0
    assert form["spaces"] == []
    assert (await _text(server, k["reader"], "guided-save")) == (
        "This key cannot write to any space, so there is nowhere to save."
    )


async def _text(server: RunningServer, key: str, tool: str) -> str:
    async with mcp_session(server, key) as s:
        result = await s.call(tool)
    text: str = result.content[0].text  # type: ignore[union-attr]
    return text


async def test_prepare_file_upload_refusals_and_a_used_token(server: RunningServer) -> None:
    k = await keys(server)
    async with mcp_session(server, k["writer"]) as s:
        ticket = await s.ok("prepare-file-upload", containerTag="alpha")
        read_only = await s.error("prepare-file-upload", containerTag="beta")
        hidden = await s.error("prepare-file-upload", containerTag="hidden")
        missing = await s.error("prepare-file-upload", containerTag="no-such-space")
    assert "read" in read_only.lower()
    assert hidden.replace("hidden", "X") == missing.replace("no-such-space", "X")
    async with mcp_session(server, k["reader"]) as s:
        assert "read" in (await s.error("prepare-file-upload", containerTag="alpha")).lower()
    files = {"file": ("note.md", b"# Note\n\nThe build cache lives on the NAS.\n", "text/markdown")}
    form = {"uploadToken": ticket["uploadToken"]}
    async with httpx2.AsyncClient(timeout=30) as http:
        first = await http.post(ticket["uploadUrl"], files=files, data=form, headers={"Origin": "null"})
        second = await http.post(ticket["uploadUrl"], files=files, data=form, headers={"Origin": "null"})
        preflight = await http.options(ticket["uploadUrl"], headers={"Origin": "null"})
    assert first.status_code in (200, 202) and first.json()["space"] == "alpha"
    # The widget reads this answer from the host's origin: the upload URL allows it.
    assert first.headers["access-control-allow-origin"] == "*" and preflight.status_code == 204
    assert second.status_code == 401, second.text  # a used token is refused, like a bad key
    assert second.headers["access-control-allow-origin"] == "*"


async def test_fetch_graph_data_is_the_space_and_only_the_space(server: RunningServer) -> None:
    k = await keys(server)
    await make_space(server.db, "gamma")
    other = await make_key(server.db, await make_user(server.db, "olga"), {"gamma": "ReadWrite"}, "gamma")
    async with mcp_session(server, other) as s:
        foreign = await s.ok("add_memory", content="The ledger database lives in Oslo.")
    async with mcp_session(server, k["writer"]) as s:
        v1 = await s.ok("add_memory", content="The ledger database lives in Frankfurt.")
        # A new version by id (text equal but for case would return the live memory instead).
        v2 = await s.ok(
            "add_memory",
            content="The ledger database lives in Frankfurt am Main.",
            memoryId=v1["memory"]["id"],
        )
        await s.ok("add_memory", content="The ledger database lives in Berlin now.")
        await s.ok("add_memory", content="Lunch is at noon.")
        graph = await s.ok("fetch-graph-data")
        paged = await s.ok("fetch-graph-data", limit=2)
        second = await s.ok("fetch-graph-data", limit=2, page=2)
        too_many = await s.error("fetch-graph-data", limit=201)
        hidden = await s.error("fetch-graph-data", containerTag="gamma")
        missing = await s.error("fetch-graph-data", containerTag="no-such-space")
        launch = await s.ok("memory-graph")
    ids = {n["id"] for n in graph["nodes"]}
    memories = [n for n in graph["nodes"] if n["kind"] == "memory"]
    documents = [n for n in graph["nodes"] if n["kind"] == "document"]
    assert graph["space"] == "alpha" and graph["totalMemories"] == 4 and len(memories) == 4
    # Memories saved on their own are no documents: drawn alone, without a source link.
    assert documents == [] and foreign["memory"]["id"] not in ids
    assert [e for e in graph["edges"] if e["kind"] == "source"] == []
    assert all(e["source"] in ids and e["target"] in ids for e in graph["edges"])
    # The second version superseded the first; both are on the graph, linked as versions.
    assert v2["status"] == "updated" and v1["memory"]["id"] in ids
    version = {"source": v1["memory"]["id"], "target": v2["memory"]["id"], "kind": "version", "weight": 1.0}
    assert version in graph["edges"]
    assert next(m for m in memories if m["id"] == v1["memory"]["id"])["isLatest"] is False
    related = [e for e in graph["edges"] if e["kind"] == "related"]
    assert related and all(e["weight"] >= 0.6 for e in related)
    lunch = next(m["id"] for m in memories if m["content"] == "Lunch is at noon.")
    assert not [e for e in related if lunch in (e["source"], e["target"])]
    assert paged["hasMore"] is True and len([n for n in paged["nodes"] if n["kind"] == "memory"]) == 2
    assert second["page"] == 2 and second["hasMore"] is False
    assert "limit: must be at most 200" in too_many
    assert hidden.replace("gamma", "X") == missing.replace("no-such-space", "X")
    assert launch == {"space": "alpha", "name": "Alpha", "documentCount": 0, "memoryCount": 3}  # live ones


async def test_the_built_widgets_are_current(tmp_path: Path) -> None:
    """The committed HTML is what the sources build to (a deterministic build): rebuild and compare."""
    node = shutil.which("node")
    assert node is not None, "Node.js is required for this test (scripts/setup-test-env installs it)"
    assert (WIDGETS_SRC / "node_modules" / "esbuild").is_dir(), "run `npm ci` in server/widgets"
    proc = await asyncio.create_subprocess_exec(
        node, "build.mjs", str(tmp_path), cwd=WIDGETS_SRC, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    rebuilt, committed = _html_files(tmp_path), _html_files(BUILT)
    assert sorted(rebuilt) == sorted(committed) == sorted(f"{n}.html" for n in LAUNCHERS)
    for name, content in rebuilt.items():
        assert content == committed[name], f"{name} is stale: run `npm run build` in server/widgets"


def _html_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.glob("*.html")}
