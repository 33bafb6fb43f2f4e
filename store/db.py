"""Connections, transactions scoped to spaces (row-level security), and start-up checks."""

from __future__ import annotations

import logging
import struct
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, cast

import psycopg
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from .errors import DatabaseSetupError, EmbeddingWidthMismatch

log = logging.getLogger(__name__)

# The row-level-security policies read this per-transaction setting: a comma-separated list of
# space ids the current request may see. Unset or empty means no rows.
SPACES_SETTING = "memory_mcp.spaces"

REQUIRED_EXTENSIONS = {
    "vector": "pgvector >= 0.8 (https://github.com/pgvector/pgvector; Debian/Ubuntu: "
    "postgresql-<major>-pgvector), then CREATE EXTENSION vector",
    "pg_trgm": "the PostgreSQL contrib package (postgresql-contrib), then CREATE EXTENSION pg_trgm",
}


def async_url(url: str) -> str:
    """Accept ``postgresql://`` or ``postgresql+psycopg://`` and return the psycopg 3 dialect URL."""
    parsed = make_url(url)
    return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


class HalfVector:
    """A vector bound as a parameter in pgvector's binary ``halfvec`` form.

    Written in ``CAST(%(e)s AS halfvec)``: PostgreSQL takes the parameter's type from the cast and
    reads the bytes directly; the text form cost ~70 us of formatting in Python per vector (this
    takes ~5 us) and a parse of every number in PostgreSQL. Nothing is spliced into SQL.
    """

    __slots__ = ("data",)

    def __init__(self, vector: Sequence[float]) -> None:
        # halfvec_recv: int16 dimensions, int16 unused, then IEEE half floats, all big-endian.
        self.data = struct.pack(f">HH{len(vector)}e", len(vector), 0, *vector)


class _HalfVectorDumper(psycopg.adapt.Dumper):
    format = psycopg.pq.Format.BINARY  # oid 0: the type comes from the statement's cast

    def dump(self, obj: HalfVector) -> bytes:
        return obj.data


# Registered by the module that creates every connection: a connection copies the adapters that
# exist when it opens.
psycopg.adapters.register_dumper(HalfVector, _HalfVectorDumper)


class Database:
    """One async engine per process; every query runs in a transaction that names its spaces."""

    def __init__(self, url: str, pool_size: int = 10) -> None:
        self.url = async_url(url)
        self.engine: AsyncEngine = create_async_engine(
            self.url,
            pool_size=pool_size,
            # No overflow: a request beyond the pool waits for a pooled connection. Overflow
            # connections are closed as soon as they are returned, so every burst above the pool
            # would cost PostgreSQL a new backend per request (16 concurrent searches: ~140 calls/s
            # with overflow, ~175 without), and the pool size is the bound operators plan for.
            max_overflow=0,
            pool_pre_ping=False,
            pool_reset_on_return=None,
        )

    async def close(self) -> None:
        await self.engine.dispose()

    @asynccontextmanager
    async def transaction(
        self, spaces: Iterable[uuid.UUID] = (), settings: Mapping[str, str] | None = None
    ) -> AsyncIterator[AsyncConnection]:
        """A transaction that may see rows of ``spaces`` only (none when empty).

        ``settings`` are further transaction-local settings (e.g. ``hnsw.ef_search``); all of them
        are applied in one statement, since each round trip costs more than the statement itself.
        """
        sql, params = _settings_statement(spaces, settings, placeholder=":{}")
        async with self.engine.begin() as conn:
            if sql:
                await conn.execute(text(sql), params)
            yield conn

    @asynccontextmanager
    async def driver_transaction(
        self, spaces: Iterable[uuid.UUID] = (), settings: Mapping[str, str] | None = None
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """``transaction`` on the driver's own connection, for the hot read paths.

        It skips SQLAlchemy's per-statement work, which costs more than a small query itself.
        Parameters are psycopg's ``%(name)s``; rows are tuples unless a cursor asks for another row
        factory. (psycopg's pipeline mode would save round trips but cost more CPU: a search took
        3.5 ms of Python with it and 3.0 ms without.)
        """
        sql, params = _settings_statement(spaces, settings, placeholder="%({})s")
        async with self._driver() as pg, pg.transaction():
            if sql:
                await pg.execute(sql, params)
            yield pg

    @asynccontextmanager
    async def autocommit(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """The driver's connection without BEGIN/COMMIT, for one read of tables outside row-level security."""
        async with self._driver() as pg:
            await pg.set_autocommit(True)
            try:
                yield pg
            finally:
                if not pg.closed:
                    await pg.set_autocommit(False)

    @asynccontextmanager
    async def _driver(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection as the driver's own object.

        A failed statement is rolled back and the connection goes back to the pool; one that is
        broken, or was left mid-transaction by a cancelled request, never does.
        """
        async with self.engine.connect() as conn:
            pg = cast("psycopg.AsyncConnection[Any]", (await conn.get_raw_connection()).driver_connection)
            try:
                yield pg
            except BaseException:
                if pg.closed or pg.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    await conn.invalidate()
                raise

    def pool_status(self) -> tuple[int, int]:
        """(configured size, connections checked out)."""
        pool: Any = self.engine.pool
        return int(pool.size()), int(pool.checkedout())

    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

    async def check_ready(self, embedding_dim: int | None = None) -> None:
        """Refuse to serve on a database that lacks extensions, has a privileged role, or a wrong width."""
        async with self.engine.connect() as conn:
            have = set((await conn.execute(text("SELECT extname FROM pg_extension"))).scalars())
            for ext, how in REQUIRED_EXTENSIONS.items():
                if ext not in have:
                    raise DatabaseSetupError(f"the PostgreSQL extension '{ext}' is missing: install {how}")
            row = (
                await conn.execute(
                    text("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")
                )
            ).one()
            if row.rolsuper or row.rolbypassrls:
                raise DatabaseSetupError(
                    "the database role of the server is a superuser or has BYPASSRLS, which would defeat "
                    "row-level security between spaces: connect as a role without those attributes"
                )
            leaky = (
                await conn.execute(
                    text(
                        "SELECT count(*) FROM pg_proc WHERE NOT proleakproof AND oid IN "
                        "('ts_match_vq(tsvector, tsquery)'::regprocedure, 'texticlike(text, text)'::regprocedure)"
                    )
                )
            ).scalar_one()
            if leaky:
                log.warning(
                    "full-text and keyword search cannot use their indexes under row-level security until a "
                    "superuser runs: ALTER FUNCTION ts_match_vq(tsvector, tsquery) LEAKPROOF; "
                    "ALTER FUNCTION texticlike(text, text) LEAKPROOF; (see docs/operations.md)"
                )
            if embedding_dim is not None:
                column_dim = await embedding_column_dim(conn)
                if column_dim != embedding_dim:
                    raise EmbeddingWidthMismatch(column_dim, embedding_dim)


def _settings_statement(
    spaces: Iterable[uuid.UUID], settings: Mapping[str, str] | None, placeholder: str
) -> tuple[str | None, dict[str, str]]:
    """One ``SELECT set_config(...)`` for the space list and any other transaction-local settings."""
    values = dict(settings or {})
    ids = ",".join(str(s) for s in spaces)
    if ids:
        values[SPACES_SETTING] = ids
    if not values:
        return None, {}
    params: dict[str, str] = {}
    calls = []
    for i, (name, value) in enumerate(values.items()):
        params[f"n{i}"], params[f"v{i}"] = name, value
        calls.append(f"set_config({placeholder.format(f'n{i}')}, {placeholder.format(f'v{i}')}, true)")
    return "SELECT " + ", ".join(calls), params


async def embedding_column_dim(conn: AsyncConnection) -> int:
    """The declared width of ``memories.embedding`` (halfvec's typmod is its dimension count)."""
    dim = (
        await conn.execute(
            text(
                "SELECT atttypmod FROM pg_attribute "
                "WHERE attrelid = 'memories'::regclass AND attname = 'embedding'"
            )
        )
    ).scalar_one()
    return int(dim)
