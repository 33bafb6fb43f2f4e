"""Open the database a command should use: the embedded default under the data dir, or a URL."""

from __future__ import annotations

from dataclasses import dataclass

from memory_mcp.core.settings import Settings
from memory_mcp.store.db import Database
from memory_mcp.store.embedded import APP_ROLE, EmbeddedPostgres
from memory_mcp.store.migrate import run_migrations


@dataclass
class PreparedDatabase:
    """Where the app connects, and the embedded server to stop afterwards (if any)."""

    app_url: str
    embedded: EmbeddedPostgres | None

    def open(self, pool_size: int = 10) -> Database:
        return Database(self.app_url, pool_size=pool_size)

    def stop(self) -> None:
        if self.embedded is not None:
            self.embedded.stop()


def prepare_database(settings: Settings, migrate: bool = True) -> PreparedDatabase:
    """Start the embedded PostgreSQL when no URL is set; bring the schema to head (idempotent).

    With a URL, that role runs the migrations and serves; with the embedded default an owner role
    migrates and a least-privilege role (no superuser, no BYPASSRLS) serves.
    """
    if settings.database_url:
        if migrate:
            run_migrations(settings.database_url, settings.embedding_dim)
        return PreparedDatabase(settings.database_url, None)
    embedded = EmbeddedPostgres(settings.data_dir, shared_buffers_mb=settings.embedded_shared_buffers_mb)
    embedded.start()
    try:
        if migrate:
            run_migrations(embedded.owner_url, settings.embedding_dim, APP_ROLE)
    except BaseException:
        embedded.stop()
        raise
    return PreparedDatabase(embedded.app_url, embedded)
