"""The docs say what the product does, where a machine can tell: the README's quick start runs as
written, the limits table is the one the limit sources write, help names values as people do, the
governance example has no one reviewing their own proposals, and terminal logs carry what JSON
logs carry."""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from memory_mcp.cli import app
from memory_mcp.core import limits, settings_reference
from memory_mcp.core.logs import TextFormatter
from memory_mcp.core.settings import Settings
from memory_mcp.store import validation
from tests.server.conftest import free_port

ROOT = Path(__file__).parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "imports"


def section(markdown: str, heading: str) -> str:
    start = markdown.index(f"\n## {heading}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start : end if end != -1 else None]


def test_the_limits_table_is_written_from_the_limit_sources() -> None:
    security = (ROOT / "docs" / "security.md").read_text()
    assert limits.table() in security, "run: python -m memory_mcp.core.limits docs/security.md"
    assert f"| one memory's text | {validation.MAX_CONTENT:,} characters |" in limits.table()
    # The prose quotes the same numbers as the table.
    bad_input = next(p for p in security.split("\n- ") if p.startswith("**Bad input.**"))
    assert re.findall(r"\d{1,3}(?:,\d{3})+", bad_input) == [
        f"{validation.MAX_CONTENT:,}",
        f"{validation.MAX_DOCUMENT_TEXT:,}",
    ]


def test_help_names_values_without_python_types() -> None:
    def commands(command: Any, path: list[str]) -> list[list[str]]:
        found = [path]
        if hasattr(command, "commands"):  # a group (typer's own click, not the click package's)
            for name, sub in command.commands.items():
                found += commands(sub, [*path, name])
        return found

    runner = CliRunner()
    every = commands(typer.main.get_command(app), [])
    assert ["import"] in every and ["key", "create"] in every
    for path in every:
        shown = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert shown.exit_code == 0, shown.output
        typed = re.findall(r"<(?:str|int|float|bool|path|datetime|[a-z]+ range)>", shown.output)
        assert typed == [], (path, typed)
    serve = runner.invoke(app, ["serve", "--help"], env={"COLUMNS": "200"}).output
    assert "--port PORT" in serve and "--embedder local|URL" in serve
    imports = runner.invoke(app, ["import", "--help"], env={"COLUMNS": "200"}).output
    assert "--from jsonl|chatgpt|claude|mem0|memory-json|markdown" in imports


def test_no_curator_of_the_governance_example_reviews_their_own_proposals() -> None:
    objects = list(yaml.safe_load_all((ROOT / "docs" / "examples" / "governance.yaml").read_text()))
    review = {
        o["metadata"]["name"]
        for o in objects
        if o["kind"] == "Space" and o["spec"].get("writePolicy") == "Review"
    }
    curators, proposers = set(), set()
    for key in (o for o in objects if o["kind"] == "ApiKey"):
        for grant in key["spec"]["grants"]:
            if grant["space"] in review:
                (curators if grant["access"] == "Curate" else proposers).add(key["spec"]["user"])
    assert curators and proposers and not curators & proposers


def test_terminal_logs_carry_the_key_prefix() -> None:
    record = logging.LogRecord(
        "memory_mcp.store.identity",
        logging.WARNING,
        __file__,
        1,
        "authentication failed: %s",
        ("wrong_secret",),
        None,
    )
    record.fields = {"reason": "wrong_secret", "key_prefix": "mmk_0123456789"}
    line = TextFormatter().format(record)
    assert line.endswith("authentication failed: wrong_secret key_prefix=mmk_0123456789")


def test_every_command_of_the_readme_quick_start_runs(tmp_path: Path) -> None:
    """The block as written, in bash, for a new user whose home is ``tmp_path``."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", section(readme, "Quick start"), re.DOTALL)
    assert block is not None
    script = block.group(1)
    assert "8765" in script and script.count("$PORT") >= 3  # a variable, not the port spelt out each time
    downloads = tmp_path / "Downloads"
    downloads.mkdir()
    with zipfile.ZipFile(downloads / "chatgpt-export.zip", "w") as z:
        z.write(FIXTURES / "chatgpt" / "conversations.json", "conversations.json")
    port = str(free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_MCP_") and k != "XDG_DATA_HOME"}
    env |= {"HOME": str(tmp_path), "MEMORY_MCP_LOG_FORMAT": "text"}
    bin_dir = tmp_path / "bin"  # `memory-mcp` is this checkout's command line
    bin_dir.mkdir()
    (bin_dir / "memory-mcp").write_text(
        f'#!/bin/sh\nexec {shutil.which("python") or "python"} -m memory_mcp.cli "$@"\n'
    )
    (bin_dir / "memory-mcp").chmod(0o755)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    # The port the README names is the one serve gets here: the line that sets it is the only change.
    script = script.replace("PORT=8765", f"PORT={port}")
    run = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script + "\nkill %1\nwait %1 || true\n"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = run.communicate(timeout=900)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGTERM)
            run.wait()
    assert run.returncode == 0, err[-3000:]
    # The first listing before notes existed, the second once `--grant-to` gave it to the bootstrap key.
    assert out.count('"key":"notes"') == 1
    assert '"key":"default"' in out
    assert "dry run: would import 4 memories and 3 documents into 'notes'" in err
    assert "imported 4 memories and 3 documents into 'notes'" in err
    assert "## chatgpt" in (tmp_path / "notes.md").read_text()
    assert re.search(r"^mmk_[0-9a-f]{10}_\S+$", out, re.MULTILINE)  # the new key, on stdout


def test_the_settings_reference_is_written_from_the_settings() -> None:
    page = (ROOT / "docs" / "settings.md").read_text()
    assert settings_reference.reference() in page, (
        "run: python -m memory_mcp.core.settings_reference docs/settings.md"
    )
    assert set(settings_reference.described()) == set(Settings.model_fields)
    table = page[page.index(settings_reference.BEGIN) :]
    variables = re.findall(r"^\| `(MEMORY_MCP_[A-Z0-9_]+)` \|", table, re.MULTILINE)
    assert sorted(variables) == sorted(f"MEMORY_MCP_{name.upper()}" for name in Settings.model_fields)
    assert "| `MEMORY_MCP_PORT` | `8765` | a whole number, at least 1, at most 65535 |" in table
    assert "| `MEMORY_MCP_MAX_BODY_BYTES` | `1048576` (1 MiB) |" in table


def test_a_variable_of_the_settings_reference_sets_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_MCP_OAUTH_REDIRECT_HOSTS", '["claude.ai", "chatgpt.com"]')  # as the page says
    monkeypatch.setenv("MEMORY_MCP_PROFILE_TOKEN_BUDGET", "400")
    settings = Settings()
    assert settings.oauth_redirect_hosts == ["claude.ai", "chatgpt.com"]
    assert settings.profile_token_budget == 400


def test_the_readme_lists_every_page_of_the_docs() -> None:
    listed = section((ROOT / "README.md").read_text(), "Documentation")
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert "settings.md" in pages and "administration.md" in pages
    assert [p for p in pages if f"(docs/{p})" not in listed] == []
