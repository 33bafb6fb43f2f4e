"""Every mistake a person can make on the command line ends in one line that names it, never a traceback.

The commands run through the real entry point (typer's runner on ``memory_mcp.cli.app``, and a few
as real processes) against one real embedded PostgreSQL database shared by every case.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from typer.testing import CliRunner

from memory_mcp.cli import app
from memory_mcp.store.embedded import EmbeddedPostgres
from tests.conftest import fresh_database
from tests.server.conftest import free_port

UNREACHABLE = "postgresql://memory:secret@127.0.0.1:1/memory_mcp"
UNRESOLVABLE = "postgresql://memory@no-such-host.invalid/memory_mcp"


@dataclass(frozen=True)
class Setup:
    url: str  # the owner role of a migrated database, as `migrate` would use
    missing: str  # the same server, a database that does not exist
    tmp: Path


def run(*args: str) -> tuple[int, str, str, BaseException | None]:
    done = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    return done.exit_code, done.stdout, done.stderr, done.exception


def manifest(*objects: dict[str, object]) -> str:
    return yaml.safe_dump_all(list(objects))


def obj(kind: str, name: str, **spec: object) -> dict[str, object]:
    return {"apiVersion": "memory-mcp.io/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}


@pytest.fixture(scope="module")
def setup(pg: EmbeddedPostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """A space `team`, a user `ada` with a command-line key `ada-key` on it, and a key of a manifest."""
    url = fresh_database(pg)[1]
    tmp = tmp_path_factory.mktemp("cli-errors")
    (tmp / "team.yaml").write_text(
        manifest(
            obj("Space", "declared", displayName="Declared"),
            obj("User", "bo", email="bo@example.com", displayName="Bo", role="Writer"),
            obj(
                "ApiKey",
                "bo-key",
                user="bo",
                grants=[{"space": "declared", "access": "Read"}],
                secretRef={"namespace": "agents", "name": "bo-key"},
            ),
        )
    )
    (tmp / "bad.yaml").write_text("kind: Space\nmetadata: {name: [unclosed\n")
    (tmp / "empty.jsonl").write_text("")
    (tmp / "kept.md").write_text("an earlier export\n")
    (tmp / "latin1.jsonl").write_bytes('{"type": "memory", "content": "café"}\n'.encode("latin-1"))
    (tmp / "folder").mkdir()
    for args in (
        ("space", "create", "team"),
        ("user", "create", "ada", "--email", "ada@example.com", "--role", "Writer"),
        ("key", "create", "ada-key", "--user", "ada", "--grant", "team=ReadWrite"),
        ("apply", "-f", str(tmp / "team.yaml")),
    ):
        code, _, err, _ = run(*args, "--database-url", url)
        assert code == 0, err
    missing = make_url(url).set(database="no_such_db").render_as_string(hide_password=False)
    yield Setup(url, missing, tmp)


# (command line, what the one line must say). {url}: the test database; {tmp}: a folder of files.
ONE_LINE_ERRORS = [
    # Paths.
    (
        "export --space team -o /nonexistent/dir/x.md --database-url {url}",
        "cannot write /nonexistent/dir/x.md: there is no folder /nonexistent/dir",
    ),
    ("export --space team -o {tmp}/folder --database-url {url}", "cannot write {tmp}/folder: it is a folder"),
    ("export --space nowhere -o {tmp}/kept.md --database-url {url}", "space 'nowhere' not found"),
    ("import /nonexistent.jsonl --space team --database-url {url}", "cannot read /nonexistent.jsonl"),
    ("import {tmp}/latin1.jsonl --space team --database-url {url}", "latin1.jsonl: not UTF-8 text"),
    ("import {tmp}/folder --space team --database-url {url}", "folder: Is a directory"),
    ("import --from chatgpt /nonexistent.zip --space team --database-url {url}", "/nonexistent.zip"),
    ("apply -f /nonexistent.yaml --database-url {url}", "cannot read /nonexistent.yaml"),
    ("apply -f {tmp}/bad.yaml --database-url {url}", "bad.yaml: not valid YAML at line 3, column 1: while parsing a flow sequence: expected ',' or ']', but got '<stream end>'"),
    ("apply -f {tmp}/team.yaml --keys-out {tmp}/folder --database-url {url}", "folder: Is a directory"),
    # Databases that cannot be reached or named.
    ("migrate --database-url " + UNREACHABLE, 'cannot reach the database: connection to server at "127.0.0.1", port 1'),
    ("apply -f {tmp}/team.yaml --database-url " + UNREACHABLE, "cannot reach the database"),
    ("space list --database-url " + UNREACHABLE, "cannot reach the database"),
    ("backfill --database-url " + UNREACHABLE, "cannot reach the database"),
    ("review list --space team --as ada --database-url " + UNREACHABLE, "cannot reach the database"),
    ("user list --database-url " + UNRESOLVABLE, "cannot reach the database: failed to resolve host"),
    ("migrate --database-url {missing}", 'database "no_such_db" does not exist'),
    # A data dir that does not exist.
    ("space list --data-dir {tmp}/typo", "no data dir at {tmp}/typo: run `memory-mcp serve --data-dir {tmp}/typo` first"),
    ("migrate --data-dir {tmp}/typo", "no data dir at {tmp}/typo"),
    ("backfill --data-dir {tmp}/typo", "no data dir at {tmp}/typo"),
    ("apply -f {tmp}/team.yaml --data-dir {tmp}/typo", "no data dir at {tmp}/typo"),
    ("export --space team --data-dir {tmp}/folder", "no data dir at {tmp}/folder"),
    ("key grant ada-key team=Read --data-dir {tmp}/typo", "no data dir at {tmp}/typo"),
    # Names that are not there.
    ("space delete nowhere --yes --database-url {url}", "space 'nowhere' not found (memory-mcp space list shows them)"),
    ("user deactivate nobody --database-url {url}", "user 'nobody' not found (memory-mcp user list shows them)"),
    ("key revoke no-key --database-url {url}", "api key 'no-key' not found (memory-mcp key list shows them)"),
    ("key grant no-key team=Read --database-url {url}", "api key 'no-key' not found"),
    ("key grant ada-key nowhere=Read --database-url {url}", "space 'nowhere' not found"),
    ("key ungrant ada-key nowhere --database-url {url}", "space 'nowhere' not found"),
    ("key create k2 --user nobody --grant team=Read --database-url {url}", "user 'nobody' not found"),
    ("export --space nowhere --database-url {url}", "space 'nowhere' not found"),
    ("import {tmp}/empty.jsonl --space nowhere --database-url {url}", "space 'nowhere' not found"),
    ("import {tmp}/empty.jsonl --space team --as-user nobody --database-url {url}", "user 'nobody' not found"),
    ("space create fresh --grant-to no-key --database-url {url}", "api key 'no-key' not found"),
    # Values that are not what they must be.
    ("key grant ada-key team=Admin --database-url {url}", "grants[0].access: must be 'Read', 'ReadWrite' or 'Curate', got 'Admin'"),
    ("key grant ada-key team --database-url {url}", "grants[0].access: must be"),
    ("space create fresh --grant-to ada-key=Owner --database-url {url}", "--grant-to: must be 'Read'"),
    ("key create k2 --user ada --grant team=Read --expires soon --database-url {url}", "--expires: must be a date"),
    ("key create k2 --user ada --grant team=Read --expires 2020-01-31 --database-url {url}", "--expires: must be in the future"),
    ("space create Bad_Key --database-url {url}", "key: must be 1-63 lowercase letters"),
    ("export --space team --format memory-json --history --database-url {url}", "--history: memory-json holds the latest state only"),
    # What the command line may not do, and names taken.
    ("key grant bo-key declared=ReadWrite --database-url {url}", "api key 'bo-key' is managed by apply/the operator; change spec.grants in its manifest (the ApiKey named 'bo-key')"),
    ("key ungrant ada-key team --database-url {url}", "key 'ada-key' would hold no grant; revoke it instead"),
    ("user create ada --email other@example.com --role Reader --database-url {url}", "user 'ada' already exists"),
    ("space create team --database-url {url}", "space 'team' already exists"),
]  # fmt: skip


def test_every_error_path_is_one_line_with_exit_code_1(setup: Setup) -> None:
    assert len(ONE_LINE_ERRORS) >= 25
    failures = []
    for line, expected in ONE_LINE_ERRORS:
        args = [a.format(url=setup.url, missing=setup.missing, tmp=setup.tmp) for a in line.split()]
        code, out, err, _ = run(*args)
        lines = err.strip().splitlines()
        want = expected.format(tmp=setup.tmp)
        if code != 1 or len(lines) != 1 or want not in lines[0] or "Traceback" in err + out:
            failures.append(f"{line}: exit {code}, stderr {err!r}")
    assert not failures, "\n".join(failures)
    # The refusals changed nothing: no space `fresh`, the key kept its grant, nothing under the typo.
    code, out, _, _ = run("space", "list", "--json", "--database-url", setup.url)
    assert code == 0 and '"fresh"' not in out
    assert not (setup.tmp / "typo").exists()
    assert (setup.tmp / "kept.md").read_text() == "an earlier export\n"  # a failed export leaves it be
    code, out, _, _ = run("key", "list", "--json", "--database-url", setup.url)
    assert '"ada-key"' in out and '"team": "ReadWrite"' in out


USAGE_ERRORS = [
    "key grant ada-key",  # no grant given
    "user create eve --email e@example.com --role Admin",
    "export --space team --format pdf",
    "space list --database-url mysql://localhost/db",
    "space list --database-url postgresql://u@host:notaport/db",
]


def test_usage_errors_exit_2_and_name_the_option(setup: Setup) -> None:
    for line in USAGE_ERRORS:
        code, out, err, _ = run(*line.split())
        assert code == 2, (line, err)
        assert "Traceback" not in err + out
        named = [ln for ln in err.splitlines() if ln.startswith(("Error:", "invalid setting"))]
        assert len(named) == 1, (line, err)
    _, _, err, _ = run(*USAGE_ERRORS[-1].split())
    assert err.strip() == (
        "invalid setting database_url: Value error, database_url is not a valid URL: Port could not be "
        "cast to integer value as 'notaport'"
    )


def test_debug_shows_the_error_itself(setup: Setup) -> None:
    code, _, err, exc = run("--debug", "space", "list", "--database-url", UNREACHABLE)
    assert code == 1 and err == ""
    assert isinstance(exc, OperationalError)  # raised as it is, for the traceback


def cli_process(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run(
        [sys.executable, "-m", "memory_mcp.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "MEMORY_MCP_LOG_FORMAT": "text"},
    )


def test_a_real_process_prints_one_line_and_a_traceback_only_with_debug(tmp_path: Path) -> None:
    for args, expected in (
        (("export", "--space", "team", "-o", "/nonexistent/dir/x.md", "--database-url", UNREACHABLE), "x.md"),
        (("serve", "--port", str(free_port()), "--database-url", UNREACHABLE), "cannot reach the database"),
        (("migrate", "--data-dir", str(tmp_path / "typo")), f"no data dir at {tmp_path / 'typo'}"),
    ):
        done = cli_process(*args)
        assert done.returncode == 1, done.stderr
        assert done.stderr.startswith("error: ") and expected in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    debug = cli_process("--debug", "migrate", "--database-url", UNREACHABLE)
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "OperationalError" in debug.stderr
    assert "secret" not in debug.stderr  # the URL's password is not in the driver's message
