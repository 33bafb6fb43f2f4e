"""Connections, transactions scoped to spaces (row-level security), and start-up checks."""

from __future__ import annotations

import logging
import re
import select
import struct
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass
from types import TracebackType
from typing import Any, cast

import psycopg
import sqlalchemy.exc
from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from .errors import DatabaseSetupError, DatabaseUnavailable, EmbeddingWidthMismatch

log = logging.getLogger(__name__)

# The row-level-security policies read this per-transaction setting: a comma-separated list of
# space ids the current request may see. Unset or empty means no rows.
SPACES_SETTING = "memory_mcp.spaces"

REQUIRED_EXTENSIONS = {
    "vector": "pgvector >= 0.8 (https://github.com/pgvector/pgvector; Debian/Ubuntu: "
    "postgresql-<major>-pgvector), then CREATE EXTENSION vector",
    "pg_trgm": "the PostgreSQL contrib package (postgresql-contrib), then CREATE EXTENSION pg_trgm",
}


# SQLSTATEs that say the server, not the statement, is the problem: shutting down, crashed and
# resetting, still starting, out of connection slots, or a session it ended. Class 08 (connection
# exceptions) counts whole; a statement timeout (57014) or a deadlock does not.
UNAVAILABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "57P05", "53300"})
# Without a bound a connect to an unreachable host waits for TCP to give up (minutes), holding the
# request; with it an outage answers 503 within this many seconds. A URL's own value wins.
CONNECT_TIMEOUT_S = 5


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


@dataclass(frozen=True)
class NativeStatement:
    """A statement written with ``%(name)s`` placeholders, turned into PostgreSQL's own ``$1``, ``$2``
    once, for a raw cursor (``psycopg.AsyncRawCursor``): ``params`` puts a dict of values in order.

    psycopg rewrites the placeholders of every statement it runs, and caches that only for
    statements of at most 4096 characters: a search's first statement (about 5,700) was rewritten on
    every search (0.08 ms of its p50).
    """

    sql: str
    names: tuple[str, ...]

    @classmethod
    def of(cls, sql: str) -> NativeStatement:
        names: dict[str, str] = {}

        def number(match: re.Match[str]) -> str:
            if match.group(0) == "%%":
                return "%"
            return names.setdefault(match.group(1), f"${len(names) + 1}")

        return cls(_PLACEHOLDER.sub(number, sql), tuple(names))

    def params(self, values: Mapping[str, Any]) -> list[Any]:
        return [values[name] for name in self.names]


_PLACEHOLDER = re.compile(r"%%|%\((\w+)\)s")


class Database:
    """One async engine per process; every query runs in a transaction that names its spaces."""

    def __init__(self, url: str, pool_size: int = 10) -> None:
        self.url = async_url(url)
        connect_args = (
            {} if "connect_timeout" in make_url(self.url).query else {"connect_timeout": CONNECT_TIMEOUT_S}
        )
        self.engine: AsyncEngine = create_async_engine(
            self.url,
            pool_size=pool_size,
            # No overflow: a request beyond the pool waits for a pooled connection. Overflow
            # connections are closed as soon as they are returned, so every burst above the pool
            # would cost PostgreSQL a new backend per request (16 concurrent searches: ~140 calls/s
            # with overflow, ~175 without), and the pool size is the bound operators plan for.
            max_overflow=0,
            # Replaced by the cheaper check in _discard_if_dropped (see there).
            pool_pre_ping=False,
            pool_reset_on_return=None,
            # Statement parameters hold memory text and keys: keep them out of exception messages.
            hide_parameters=True,
            connect_args=connect_args,
        )
        event.listen(self.engine.sync_engine, "checkout", _discard_if_dropped)
        self._outage = _OutageWatch()
        # What wraps each statement of :meth:`execute` (tracing sets a span; the engine's statements
        # are traced by the engine's own events, which the driver's connection does not fire).
        self.around_statement: Callable[[str], AbstractContextManager[object]] = lambda _sql: nullcontext()

    async def execute(
        self, cur: psycopg.AsyncRawCursor[Any], statement: NativeStatement, values: Mapping[str, Any]
    ) -> None:
        """Run ``statement`` on a raw cursor of :meth:`driver_transaction`, rows in binary (a search's
        hundred candidates, numbers and arrays, decode 0.15 ms faster than from text)."""
        with self.around_statement(statement.sql):
            await cur.execute(statement.sql, statement.params(values), binary=True)

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
        with self._outage:
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
        with self._outage:
            async with self._driver() as pg, pg.transaction():
                if sql:
                    await pg.execute(sql, params)
                yield pg

    @asynccontextmanager
    async def autocommit(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """The driver's connection without BEGIN/COMMIT, for one read of tables outside row-level security."""
        with self._outage:
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
        with self._outage:
            async with self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))

    async def check_ready(self, embedding_dim: int | None = None) -> None:
        """Refuse to serve on a database that lacks extensions, has a privileged role, or a wrong width."""
        with self._outage:
            async with self.engine.connect() as conn:
                have = set((await conn.execute(text("SELECT extname FROM pg_extension"))).scalars())
                for ext, how in REQUIRED_EXTENSIONS.items():
                    if ext not in have:
                        raise DatabaseSetupError(
                            f"the PostgreSQL extension '{ext}' is missing: install {how}"
                        )
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


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached or used now, rather than a bad statement."""
    if isinstance(exc, sqlalchemy.exc.TimeoutError):  # no pooled connection came free in time
        return True
    if isinstance(exc, sqlalchemy.exc.DBAPIError):
        if exc.connection_invalidated or isinstance(exc, sqlalchemy.exc.InterfaceError):
            return True
        exc = exc.orig if exc.orig is not None else exc
    if isinstance(exc, psycopg.OperationalError):
        state = exc.sqlstate
        # No SQLSTATE: the client side failed (no connection, or it broke mid-statement).
        return state is None or state.startswith("08") or state in UNAVAILABLE_SQLSTATES
    return False


class _OutageWatch:
    """Turns connection-level failures into :class:`DatabaseUnavailable` and logs each transition.

    One warning when the database goes away and one when it answers again, however many requests
    fail in between: an outage must not fill the log with a traceback per request.
    """

    def __init__(self) -> None:
        self.down_since: float | None = None

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        if exc is None:
            if self.down_since is not None:
                log.warning("database available again after %.1f s", time.monotonic() - self.down_since)
                self.down_since = None
            return
        if not is_unavailable(exc):
            return
        if self.down_since is None:
            self.down_since = time.monotonic()
            reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            log.warning("database unavailable, answering 503 until it is back: %s", reason)
        raise DatabaseUnavailable() from None


def _discard_if_dropped(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """Pool checkout: refuse a connection that the server closed while it sat in the pool.

    An idle connection has nothing to read, so a readable socket means its backend is gone (killed,
    or PostgreSQL restarted) or sent a termination notice. The pool then opens a fresh connection
    (or fails with a connection error, mapped to 503, while the server is down). One ``poll`` with
    no timeout costs 1.2 us per checkout; ``pool_pre_ping`` costs a ``SELECT 1`` round trip, which
    made a one-query request 150 us slower (350 -> 500 us over a Unix socket). A connection that
    breaks after checkout still fails its request, once, with a 503.
    """
    pg: psycopg.AsyncConnection[Any] = dbapi_connection.driver_connection
    if pg.closed:
        raise sqlalchemy.exc.DisconnectionError("connection closed")
    poller = select.poll()
    poller.register(pg.pgconn.socket, select.POLLIN)
    if poller.poll(0):
        raise sqlalchemy.exc.DisconnectionError("the server closed the connection")


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
