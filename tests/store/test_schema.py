"""Migrations, row-level security on its own, bootstrap, and the start-up checks."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest
from alembic import command
from sqlalchemy import create_engine, text

from memory_mcp.store import identity, memories, migrate, search, spaces
from memory_mcp.store.db import Database, NativeStatement, async_url
from memory_mcp.store.embedded import APP_ROLE, EmbeddedPostgres
from memory_mcp.store.errors import DatabaseSetupError, DatabaseUnavailable, EmbeddingWidthMismatch
from memory_mcp.store.migrate import current_revision, head_revision, run_migrations
from tests.conftest import fresh_database
from tests.factories import make_key, make_space, make_user


def plain(url: str) -> str:
    return url.replace("+psycopg", "")


def test_migrations_from_empty_then_no_op(pg: EmbeddedPostgres) -> None:
    name = "mig_empty"
    with psycopg.connect(plain(pg.superuser_url), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} OWNER memory_mcp_owner")
        conn.execute(f"GRANT CONNECT ON DATABASE {name} TO {APP_ROLE}")
    with psycopg.connect(
        plain(pg.superuser_url).replace("/memory_mcp?", f"/{name}?"), autocommit=True
    ) as conn:
        conn.execute("CREATE EXTENSION vector")
        conn.execute("CREATE EXTENSION pg_trgm")
    owner = pg.owner_url.replace("/memory_mcp?", f"/{name}?")
    assert run_migrations(owner, 384, APP_ROLE) is True
    assert run_migrations(owner, 384, APP_ROLE) is False
    engine = create_engine(async_url(owner))
    with engine.connect() as conn:
        assert current_revision(conn) == head_revision()
        tables = set(
            conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")).scalars()
        )
    engine.dispose()
    assert {"spaces", "users", "api_keys", "key_grants", "documents", "memories", "audit_events"} <= tables


def test_missing_extension_is_named(pg: EmbeddedPostgres) -> None:
    name = "mig_noext"
    with psycopg.connect(plain(pg.superuser_url), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} OWNER memory_mcp_owner")
    owner = pg.owner_url.replace("/memory_mcp?", f"/{name}?")
    # pgvector is not a trusted extension: a non-superuser owner may not create it.
    with pytest.raises(DatabaseSetupError, match=r"'vector'.*CREATE EXTENSION vector"):
        run_migrations(owner, 384)


def test_a_schema_newer_than_the_release_is_refused_as_it_is(pg: EmbeddedPostgres) -> None:
    """A pod of an older image meeting a database a newer release migrated (a rollback, a rolling
    update's old pod): one line saying so, and the schema left alone."""
    _app, owner = fresh_database(pg)
    engine = create_engine(async_url(owner))
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(DatabaseSetupError, match=r"revision 9999, newer than this release knows"):
        run_migrations(owner, 384)
    with engine.connect() as conn:
        assert current_revision(conn) == "9999"
    engine.dispose()


async def test_rls_holds_on_its_own(db: Database, db_urls: tuple[str, str]) -> None:
    await make_space(db, "red")
    await make_space(db, "blue")
    user = await make_user(db)
    caller = await identity.authenticate(
        db, await make_key(db, user, {"red": "ReadWrite", "blue": "ReadWrite"})
    )
    red_fact = await memories.save_memory(db, identity.resolve_space(caller, "red"), "Red fact.")
    blue_fact = await memories.save_memory(db, identity.resolve_space(caller, "blue"), "Blue fact.")
    red = identity.resolve_space(caller, "red").space.id
    blue = identity.resolve_space(caller, "blue").space.id
    await search.record_recalls(db, {(red, red_fact.memory.id): 2, (blue, blue_fact.memory.id): 5})

    with psycopg.connect(plain(db_urls[0])) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (APP_ROLE,)
        assert conn.execute("SELECT count(*) FROM memories").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM documents").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM memory_recalls").fetchone() == (0,)
        conn.execute("SELECT set_config('memory_mcp.spaces', %s, true)", (str(red),))
        assert conn.execute("SELECT content FROM memories").fetchall() == [("Red fact.",)]
        assert conn.execute("SELECT count(*) FROM memories WHERE space_id = %s", (blue,)).fetchone() == (0,)
        assert conn.execute("SELECT space_id, recall_count FROM memory_recalls").fetchall() == [(red, 2)]
        # Writing into another space than the one set is rejected by the policy's CHECK.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                "INSERT INTO documents (space_id, title, doc_type, status, content_hash) "
                "VALUES (%s, 't', 'text', 'done', 'h')",
                (blue,),
            )
        conn.rollback()
        # Nor can the role switch the policy off.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("ALTER TABLE memories DISABLE ROW LEVEL SECURITY")
        conn.rollback()
        row = conn.execute(
            "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        assert row == (False, False)


async def test_check_ready_refuses_a_superuser_and_a_width_mismatch(pg: EmbeddedPostgres) -> None:
    app_url, _ = fresh_database(pg)
    app = Database(app_url)
    try:
        await app.check_ready(384)
        with pytest.raises(EmbeddingWidthMismatch, match=r"halfvec\(384\).*768.*backfill"):
            await app.check_ready(768)
    finally:
        await app.close()
    su = Database(pg.superuser_url)
    try:
        with pytest.raises(DatabaseSetupError, match="superuser or has BYPASSRLS"):
            await su.check_ready()
    finally:
        await su.close()


async def test_bootstrap_once(db: Database) -> None:
    key = await identity.bootstrap(db)
    assert key is not None and key.startswith("mmk_")
    caller = await identity.authenticate(db, key)
    assert caller.user.role.value == "Writer"
    assert identity.resolve_space(caller, None).space.key == "default"
    assert identity.resolve_space(caller, None).can_write
    assert await identity.bootstrap(db) is None


async def test_space_retain_detaches_and_restores(db: Database) -> None:
    await make_space(db, "kept")
    user = await make_user(db)
    key = await make_key(db, user, {"kept": "ReadWrite"})
    caller = await identity.authenticate(db, key)
    await memories.save_memory(db, identity.resolve_space(caller, "kept"), "Kept fact.")
    assert await spaces.delete_space(db, "kept") == "Retain"
    caller = await identity.authenticate(db, key)
    assert caller.grants == ()
    await spaces.upsert_space(db, "kept", "Kept again")
    caller = await identity.authenticate(db, key)
    page = await memories.list_memories(db, identity.resolve_space(caller, "kept"))
    assert [m.content for m in page.items] == ["Kept fact."]


async def test_transaction_settings_are_local_to_the_transaction(db: Database) -> None:
    from sqlalchemy import text as sql

    settings = {"hnsw.ef_search": "123", "hnsw.iterative_scan": "relaxed_order"}
    async with db.transaction(settings=settings) as conn:
        assert (await conn.execute(sql("SHOW hnsw.ef_search"))).scalar_one() == "123"
        assert (await conn.execute(sql("SHOW hnsw.iterative_scan"))).scalar_one() == "relaxed_order"
    async with db.transaction() as conn:
        assert (
            await conn.execute(sql("SHOW hnsw.ef_search"))
        ).scalar_one() != "123"  # gone with the transaction


async def test_driver_transactions_leave_nothing_on_the_pooled_connection(db_urls: tuple[str, str]) -> None:
    from sqlalchemy import text as sql

    db = Database(db_urls[0], pool_size=1)  # one connection: the next user gets the same one
    space = uuid.uuid4()
    try:
        async with db.driver_transaction([space], settings={"hnsw.ef_search": "123"}) as pg:
            cur = await pg.execute(
                "SELECT current_setting('memory_mcp.spaces'), current_setting('hnsw.ef_search')"
            )
            assert await cur.fetchone() == (str(space), "123")
        with pytest.raises(psycopg.errors.DivisionByZero):
            async with db.driver_transaction([space]) as pg:
                await (await pg.execute("SELECT 1 / 0")).fetchone()

        async def slow() -> None:
            async with db.driver_transaction([space]) as pg:
                await (await pg.execute("SELECT pg_sleep(30)")).fetchone()

        task = asyncio.create_task(slow())  # a request cancelled mid-query (a client went away)
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        other = Database(db_urls[0], pool_size=1)
        try:  # the server side of the connection goes away mid-transaction: a retryable outage
            with pytest.raises(DatabaseUnavailable):
                async with db.driver_transaction([space]) as pg:
                    pid = (await (await pg.execute("SELECT pg_backend_pid()")).fetchone() or [0])[0]
                    async with other.autocommit() as conn:
                        await conn.execute("SELECT pg_terminate_backend(%s)", [pid])
                    await (await pg.execute("SELECT 1")).fetchone()
        finally:
            await other.close()
        async with db.transaction() as conn:
            row = (
                await conn.execute(
                    sql(
                        "SELECT current_setting('memory_mcp.spaces', true), current_setting('hnsw.ef_search', true)"
                    )
                )
            ).one()
            assert not row[0] and row[1] != "123"  # both went with the transaction
    finally:
        await db.close()


async def test_a_native_statement_runs_as_its_placeholders_say(db: Database) -> None:
    """Each name becomes one numbered placeholder wherever it repeats, ``%%`` a literal percent, and
    the values go in the placeholders' order."""
    statement = NativeStatement.of("SELECT %(a)s::int + %(b)s::int, %(a)s::int, '100%%' LIKE %(pattern)s")
    assert statement.sql == "SELECT $1::int + $2::int, $1::int, '100%' LIKE $3"
    async with db.driver_transaction() as pg, psycopg.AsyncRawCursor(pg) as cur:
        await cur.execute(statement.sql, statement.params({"pattern": "1%", "b": 2, "a": 40, "unused": 0}))
        assert await cur.fetchone() == (42, 40, True)


async def test_driver_transactions_commit_or_roll_back(db_urls: tuple[str, str]) -> None:
    db = Database(db_urls[0], pool_size=1)
    try:
        async with db.autocommit() as pg:
            await pg.execute("CREATE TEMP TABLE probe (n int)")  # lives as long as the one connection
        async with db.driver_transaction() as pg:
            await pg.execute("INSERT INTO probe VALUES (1)")
        with pytest.raises(psycopg.errors.DivisionByZero):
            async with db.driver_transaction() as pg:
                await pg.execute("INSERT INTO probe VALUES (2)")
                await pg.execute("SELECT 1 / 0")
        with pytest.raises(LookupError):
            async with db.driver_transaction() as pg:
                await pg.execute("INSERT INTO probe VALUES (3)")
                raise LookupError("a failure between statements")
        async with db.autocommit() as pg:
            assert await (await pg.execute("SELECT array_agg(n) FROM probe")).fetchone() == ([1],)
            assert pg.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    finally:
        await db.close()


async def test_a_burst_larger_than_the_pool_reuses_its_connections(db_urls: tuple[str, str]) -> None:
    """Requests beyond the pool wait for a pooled connection; none is opened and closed per request.

    (A connection opened for a burst and closed after it costs PostgreSQL a new backend each time:
    under 16 concurrent searches that churn held the server to ~140 calls/s instead of ~175.)
    """
    db = Database(db_urls[0], pool_size=3)
    backends: set[int] = set()

    async def request() -> None:
        async with db.driver_transaction() as pg:
            backends.add((await (await pg.execute("SELECT pg_backend_pid()")).fetchone() or [0])[0])
            await pg.execute("SELECT pg_sleep(0.05)")

    try:
        for _ in range(3):
            await asyncio.gather(*(request() for _ in range(8)))
        assert len(backends) == 3
        assert db.pool_status() == (3, 0)
    finally:
        await db.close()


async def test_recall_counts_move_to_their_own_table_and_back(db: Database, db_urls: tuple[str, str]) -> None:
    """Migration 0020 moves the counts kept on ``memories`` into ``memory_recalls`` with their
    spaces, and its downgrade moves them back: none is lost either way."""
    await make_space(db, "red")
    user = await make_user(db)
    caller = await identity.authenticate(db, await make_key(db, user, {"red": "ReadWrite"}))
    ctx = identity.resolve_space(caller, "red")
    recalled = (await memories.save_memory(db, ctx, "Red fact.")).memory
    never = (await memories.save_memory(db, ctx, "Another red fact.")).memory
    await search.record_recalls(db, {(ctx.space.id, recalled.id): 4})
    await db.close()  # the pool's connections would hold the tables the migration alters

    engine = create_engine(async_url(db_urls[1]))
    visible = text("SELECT set_config('memory_mcp.spaces', :s, false)")
    try:
        with engine.connect() as conn:
            command.downgrade(migrate._config(conn), "0019")
            conn.commit()
            conn.execute(visible, {"s": str(ctx.space.id)})
            counts = dict(conn.execute(text("SELECT id, recall_count FROM memories")).all())
            assert counts == {recalled.id: 4, never.id: 0}
            command.upgrade(migrate._config(conn), "head")
            conn.commit()
            conn.execute(visible, {"s": str(ctx.space.id)})
            moved = conn.execute(text("SELECT memory_id, space_id, recall_count FROM memory_recalls")).all()
            assert [tuple(row) for row in moved] == [(recalled.id, ctx.space.id, 4)]
            assert current_revision(conn) == head_revision()
    finally:
        engine.dispose()
