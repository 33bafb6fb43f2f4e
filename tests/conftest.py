"""Shared fixtures: one embedded PostgreSQL per test run, a fresh migrated database per test."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import Embedder, make_embedder
from memory_mcp.embedder.static import StaticModel, load_static_model
from memory_mcp.store.db import Database
from memory_mcp.store.embedded import APP_ROLE, OWNER_ROLE, EmbeddedPostgres, superuser_setup
from memory_mcp.store.migrate import run_migrations

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The static model is distilled once per machine, not once per test's data dir (checksummed: a
# stale or damaged cache is distilled again). The precision probe has tests of its own.
os.environ.setdefault("MEMORY_MCP_STATIC_EMBEDDING_DIR", str(Path.home() / ".cache" / "memory-mcp-tests"))
# The machine's cache (precision verdicts, tables) of the tests' own, never the user's.
os.environ.setdefault("MEMORY_MCP_CACHE_DIR", str(Path.home() / ".cache" / "memory-mcp-tests"))
os.environ.setdefault("MEMORY_MCP_EMBEDDING_PRECISION", "fp32")

TEMPLATE = "mm_template"


_counter = itertools.count()


@pytest.fixture(scope="session")
def pg() -> Iterator[EmbeddedPostgres]:
    # Not under pytest's tmp dir: that one is private to root, and PostgreSQL runs as its own user.
    root = Path(tempfile.mkdtemp(prefix="memory-mcp-test-"))
    server = EmbeddedPostgres(root)
    server.start()
    template_url = server.owner_url.replace("/memory_mcp?", f"/{TEMPLATE}?")
    with psycopg.connect(server.superuser_url.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {TEMPLATE} OWNER {OWNER_ROLE}")
        conn.execute(f"GRANT CONNECT ON DATABASE {TEMPLATE} TO {APP_ROLE}")
    with psycopg.connect(template_url.replace("memory_mcp_owner", "postgres"), autocommit=True) as conn:
        superuser_setup(conn)
    run_migrations(template_url, 384, APP_ROLE)
    yield server
    server.stop()
    shutil.rmtree(root, ignore_errors=True)


def fresh_database(pg: EmbeddedPostgres) -> tuple[str, str]:
    """Create a new database from the migrated template; returns (app url, owner url)."""
    name = f"t{os.getpid()}_{next(_counter)}"
    with psycopg.connect(pg.superuser_url.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE} OWNER {OWNER_ROLE}")
        conn.execute(f"GRANT CONNECT ON DATABASE {name} TO {APP_ROLE}")
    return (
        pg.app_url.replace("/memory_mcp?", f"/{name}?"),
        pg.owner_url.replace("/memory_mcp?", f"/{name}?"),
    )


@pytest.fixture
def db_urls(pg: EmbeddedPostgres) -> tuple[str, str]:
    return fresh_database(pg)


@pytest.fixture
async def db(db_urls: tuple[str, str]) -> AsyncIterator[Database]:
    database = Database(db_urls[0], pool_size=4)
    yield database
    await database.close()


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="session")
async def embedder() -> AsyncIterator[Embedder]:
    """The real packaged model, in-process, loaded once for the whole run."""
    instance = await make_embedder(Settings(embedder="local"))
    yield instance
    await instance.aclose()


@pytest.fixture(scope="session")
def static_model() -> StaticModel:
    """The static model distilled from the packaged MiniLM (from the shared cache, or distilled)."""
    return load_static_model(Settings().static_embedding_cache_dir)
