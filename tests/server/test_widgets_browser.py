"""The four widgets in headless Chromium, hosted by ext-apps' AppBridge (tests/server/widget_host),
against the real server with real keys: what a person sees and does, and what the server then holds."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

from memory_mcp.store.access import Role
from tests.factories import make_key, make_space, make_user
from tests.server.conftest import RunningServer, mcp_session

HOST_DIR = Path(__file__).parent / "widget_host"
MAX_INLINE_HEIGHT = 500  # px: the largest inline widget a connectors directory accepts
MARKER = "zebra-7731"
PDF_TEXT = [
    "Runbook for the payments service.",
    "Restart the ledger workers with the blue-green switch, never by hand.",
    "Escalate failed settlements to the finance on-call within one hour.",
]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "Debian's chromium is required for this test (scripts/setup-test-env installs it)"
    return found


async def drive(config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    node = shutil.which("node")
    assert node is not None, "Node.js is required for this test (scripts/setup-test-env installs it)"
    assert (HOST_DIR / "node_modules" / "puppeteer-core").is_dir(), "run `npm ci` in tests/server/widget_host"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    log = tmp_path / "drive.log"  # what the page and the driver said, for a failure's message
    with log.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            node, "drive.mjs", str(path), cwd=HOST_DIR, stdout=asyncio.subprocess.PIPE, stderr=stderr
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 600)
    lines = [line for line in log.read_text().splitlines() if "dbus" not in line]
    assert proc.returncode == 0, "\n".join(lines[-60:])
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


async def test_widgets_in_a_real_browser(server: RunningServer, tmp_path: Path) -> None:
    for space in ("alpha", "beta", "gamma", "other"):
        await make_space(server.db, space)
    ann = await make_user(server.db, "ann")
    picker = await make_key(server.db, ann, {"alpha": "ReadWrite", "beta": "Read"}, "alpha")
    writer = await make_key(
        server.db, ann, {"alpha": "ReadWrite", "beta": "Read", "other": "ReadWrite"}, "other"
    )
    reader = await make_key(
        server.db, await make_user(server.db, "rita", role=Role.READER), {"alpha": "ReadWrite"}, "alpha"
    )
    async with mcp_session(server, writer) as s:
        first = await s.ok(
            "add_memory", content="The ledger database lives in Frankfurt.", containerTag="alpha"
        )
        await s.ok(
            "add_memory",
            content="The ledger database lives in Frankfurt am Main.",
            memoryId=first["memory"]["id"],
            containerTag="alpha",
        )
        await s.ok("add_memory", content="The ledger database lives in Berlin now.", containerTag="alpha")
        await s.ok("add_memory", content="Payments settle twice a day.", containerTag="alpha")
        elsewhere = await s.ok("add_memory", content="Gamma-ray bursts are bright.", containerTag="other")

    screenshots = Path(os.environ.get("WIDGET_SCREENSHOTS", tmp_path))
    config = {
        "mcpUrl": server.mcp_url,
        "chromium": chromium(),
        "screenshots": str(screenshots),
        "keys": {"picker": picker, "writer": writer, "reader": reader},
        "pick": "beta",
        "prefill": "Deploys are frozen on Fridays.",
        "marker": MARKER,
        "saveInto": "alpha",
        "uploadFile": str(tmp_path / "runbook.pdf"),
        "pdfText": PDF_TEXT,
    }
    seen = await drive(config, tmp_path)

    # A connectors directory takes widgets at most 500 px tall inline: what each one needs at its
    # fullest (the picker with its list, the form with a draft, the finished upload, the graph with
    # its details, wide and narrow) fits, and so does what the host shows from the widget's own size
    # reports.
    heights = seen["heights"]
    assert set(heights) == {
        "select-space",
        "guided-save",
        "guided-save-reader",
        "upload-file",
        "memory-graph",
        "memory-graph-narrow",
    }
    for name, height in heights.items():
        assert 0 < height["content"] <= MAX_INLINE_HEIGHT, (name, height)
        assert 0 < height["shown"] <= MAX_INLINE_HEIGHT, (name, height)

    # select-space: exactly the key's spaces (gamma and other have no grant); the click switched.
    picked = seen["selectSpace"]
    assert sorted(picked["listed"]) == ["alpha", "beta"]
    assert picked["filtered"] == ["beta"]
    assert picked["current"] == "beta" and picked["whoAmI"] == "beta"
    async with mcp_session(server, picker) as s:
        assert (await s.ok("whoAmI"))["activeSpace"] == "beta"

    # guided-save: prefilled; only writable spaces offered; nothing saved before the submit.
    saved = seen["guidedSave"]
    assert saved["prefilled"] == "Deploys are frozen on Fridays."
    assert sorted(saved["options"]) == ["alpha", "other"]  # beta is Read only
    assert saved["countBefore"] == 0
    assert "Saved in space 'alpha'" in saved["status"]
    async with mcp_session(server, writer) as s:
        found = await s.ok("search_memory", keyword=MARKER, containerTag="alpha", includeProfile=False)
    assert [r["content"] for r in found["results"]] == [f"Deploys are frozen on Fridays. {MARKER}"]
    assert found["results"][0]["category"] == "policy"

    assert seen["readerSave"] == {
        "notice": "This key cannot write to any space, so there is nowhere to save.",
        "formHidden": True,
    }

    # upload-file: the PDF went in, its progress showed, and the document is done with memories.
    upload = seen["upload"]
    assert upload["status"] == "done", upload
    assert upload["progress"] == "100" and upload["text"].startswith("Done: 'Payments runbook'")
    async with mcp_session(server, writer) as s:
        document = await s.ok("getDocument", documentId=upload["documentId"])
        assert document["status"] == "done" and document["space"] == "alpha"
        assert "blue-green switch" in document["content"]
        hits = await s.ok("search_memory", keyword="blue-green", containerTag="alpha", includeProfile=False)
        assert hits["count"] >= 1
        listed_docs = await s.ok("listDocuments", containerTag="alpha", limit=50)
        listed_memories = await s.ok("listMemories", containerTag="alpha", limit=50, status="all")

    # memory-graph: every document and memory of alpha is a node; nothing of the other space is.
    graph = seen["graph"]
    drawn = {n["id"] for n in graph["nodes"]}
    expected = {d["id"] for d in listed_docs["documents"]} | {m["id"] for m in listed_memories["memories"]}
    assert drawn == expected
    assert elsewhere["memory"]["id"] not in drawn and elsewhere["memory"]["documentId"] not in drawn
    assert {n["kind"] for n in graph["nodes"]} == {"document", "memory"}
    assert (
        "source" in graph["edges"] and "version" in graph["edges"]
    )  # the second version is linked to the first
    assert first["memory"]["id"] in drawn  # the superseded version is drawn too
    # The search finds the saved memory; a memory saved on its own has no document to draw (documents
    # are uploads and long texts). The details panel shows the first match.
    assert found["results"][0]["documentId"] not in drawn
    assert set(graph["matches"]) == {found["results"][0]["id"]} and MARKER in graph["details"]
    assert graph["zoomed"] != graph["fitted"]  # the zoom button changed the view

    # The widgets reached the server only through their tools, app-only ones included.
    assert {"set-active-space", "save-memory", "prepare-file-upload", "fetch-graph-data"} <= set(
        seen["calls"]
    )
    for name in ("select-space", "guided-save", "upload-file", "memory-graph"):
        assert (screenshots / f"widget-{name}.png").stat().st_size > 5_000
