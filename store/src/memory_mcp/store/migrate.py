"""Schema migrations (Alembic), run at start-up and by ``memory-mcp migrate``; idempotent."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Connection, create_engine, text

from .db import REQUIRED_EXTENSIONS, async_url
from .errors import DatabaseSetupError

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# Any fixed 64-bit number: serializes concurrent migrators (several server pods starting at once).
ADVISORY_LOCK_ID = 0x6D656D6F7279


def _config(connection: Connection | None = None, embedding_dim: int = 384) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    cfg.attributes["embedding_dim"] = embedding_dim
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def current_revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


def _ensure_extensions(conn: Connection) -> None:
    available = set(conn.execute(text("SELECT name FROM pg_available_extensions")).scalars())
    installed = set(conn.execute(text("SELECT extname FROM pg_extension")).scalars())
    for ext, how in REQUIRED_EXTENSIONS.items():
        if ext in installed:
            continue
        if ext not in available:
            raise DatabaseSetupError(f"the PostgreSQL extension '{ext}' is not available: install {how}")
        try:
            with conn.begin_nested():
                conn.execute(text(f"CREATE EXTENSION IF NOT EXISTS {ext}"))
        except Exception as exc:
            raise DatabaseSetupError(
                f"the PostgreSQL extension '{ext}' is available but not created, and this role may not "
                f"create it: ask a superuser to run CREATE EXTENSION {ext}; ({exc.__class__.__name__})"
            ) from exc


def _refuse_unknown_revision(revision: str | None) -> None:
    """A schema this code has no migration for was made by a newer release: say so, change nothing."""
    if revision is None:
        return
    try:
        ScriptDirectory.from_config(_config()).get_revision(revision)
    except CommandError:
        raise DatabaseSetupError(
            f"the database schema is at revision {revision}, newer than this release knows (its newest "
            f"is {head_revision()}): run the release that migrated it, or a later one"
        ) from None


def run_migrations(url: str, embedding_dim: int = 384, app_role: str | None = None) -> bool:
    """Bring the schema to head; returns True when something was applied.

    ``app_role``, when given, is granted DML on every table (the server's least-privilege role).
    """
    engine = create_engine(async_url(url))
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:id)"), {"id": ADVISORY_LOCK_ID})
            try:
                _ensure_extensions(conn)
                conn.commit()
                before = current_revision(conn)
                _refuse_unknown_revision(before)
                command.upgrade(_config(conn, embedding_dim), "head")
                conn.commit()
                applied = before != current_revision(conn)
                if app_role:
                    conn.execute(
                        text(
                            f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{app_role}";'
                            f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO "{app_role}"'
                        )
                    )
                    conn.commit()
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": ADVISORY_LOCK_ID})
                conn.commit()
        return applied
    finally:
        engine.dispose()
