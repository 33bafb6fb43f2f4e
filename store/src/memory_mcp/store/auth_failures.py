"""Failed authentications counted per client address and per key prefix, in fixed windows, in
PostgreSQL: one budget for the whole deployment, however many server pods share its traffic.

Only a failure touches the database: one statement counts it for its address and its key prefix at
once (an upsert that rolls an ended window and returns the counts), so a client that spreads its
failures over N pods meets the limit in total, not N times over. What the database answers is kept
in this process as "refused until" per address and prefix: a client that goes on failing past the
limit is refused from that note, without a statement per attempt, until its window ends.

The database being unreachable never turns a failure into an error: the failure is counted in this
process instead (:class:`FailureCounts`, the per-pod budget of old), logged once, and the database
is tried again a few seconds later.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from .addresses import counted_as
from .db import Database
from .errors import DatabaseUnavailable

log = logging.getLogger(__name__)

Kind = Literal["address", "key_prefix"]
Subject = tuple[Kind, str]  # ("address", "203.0.113.7") or ("key_prefix", "0123456789")
KINDS: tuple[Kind, ...] = ("address", "key_prefix")
MAX_TRACKED = 10_000  # per kind, in this process's memory; the least recently failing go first
MAX_SUBJECT = 100  # characters kept of an address (a key prefix is 10)
# After the database failed a count, failures are counted in this process for this long before the
# database is tried again: a connect to an unreachable host waits up to its timeout (5 s), which a
# failed request should not wait for each time.
DATABASE_RETRY_S = 5.0

# Rows are taken in the order given (addresses before prefixes, see ``count``), so two pods counting
# the same pair cannot deadlock on each other's rows. The table is UNLOGGED, like the rate buckets:
# a commit then waits for no WAL flush, which was most of a count's cost (see docs/performance.md),
# and a count lost to a crash or a failover is worth nothing anyway.
_COUNT_SQL = """
INSERT INTO auth_failure_counts AS c (what, subject, window_ends_at, count)
SELECT t.what, t.subject, now() + make_interval(secs => %(window)s), 1
FROM unnest(%(whats)s::text[], %(subjects)s::text[]) WITH ORDINALITY AS t(what, subject, n)
ORDER BY t.n
ON CONFLICT (what, subject) DO UPDATE SET
    window_ends_at = CASE WHEN c.window_ends_at <= now() THEN EXCLUDED.window_ends_at ELSE c.window_ends_at END,
    count = CASE WHEN c.window_ends_at <= now() THEN 1 ELSE c.count + 1 END
RETURNING what, subject, count, extract(epoch FROM window_ends_at - now())::float8 AS left_s
"""
# A row whose window has ended counts for nothing (the next failure starts a new window), so any
# pod may delete it. SKIP LOCKED: the sweep never waits for a row being counted, and never
# deadlocks with a count.
_SWEEP_SQL = """
DELETE FROM auth_failure_counts WHERE (what, subject) IN (
    SELECT what, subject FROM auth_failure_counts WHERE window_ends_at < now() FOR UPDATE SKIP LOCKED
)
"""


@dataclass(frozen=True)
class Over:
    """A failure past the limit: when to come back, and which subjects went over with this one (each
    goes over once per window, on one pod, so a warning per subject and window is enough)."""

    retry_after_s: float
    newly_over: tuple[Subject, ...]


class FailureCounts:
    """Failures per key in fixed windows of ``window_s`` seconds, for at most ``max_keys`` keys, in
    this process's memory."""

    def __init__(
        self,
        limit: int,
        window_s: float,
        max_keys: int = MAX_TRACKED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window_s = window_s
        self.max_keys = max_keys
        self.clock = clock
        self._windows: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def add(self, key: str) -> tuple[int, float]:
        """Count one failure of ``key``: (failures in its current window, seconds left in it)."""
        now = self.clock()
        started, count = self._windows.pop(key, (now, 0))
        if now - started >= self.window_s:
            started, count = now, 0
        self._windows[key] = (started, count + 1)
        while len(self._windows) > self.max_keys:
            self._windows.popitem(last=False)
        return count + 1, started + self.window_s - now


async def count(
    db: Database, subjects: Sequence[Subject], window_s: float
) -> dict[Subject, tuple[int, float]]:
    """Count one failure of each of ``subjects`` (distinct, addresses first) in the database:
    per subject, the failures in its current window, this one included, and the seconds left in it."""
    params = {
        "whats": [what for what, _ in subjects],
        "subjects": [subject[:MAX_SUBJECT] for _, subject in subjects],
        "window": window_s,
    }
    async with db.autocommit() as pg, pg.cursor() as cur:
        await cur.execute(_COUNT_SQL, params)
        rows: list[Any] = await cur.fetchall()
    by_stored = {(what, subject): (n, left) for what, subject, n, left in rows}
    return {(what, subject): by_stored[(what, subject[:MAX_SUBJECT])] for what, subject in subjects}


async def sweep(db: Database) -> int:
    """Delete the rows whose window has ended (nobody else is counting them); how many went."""
    async with db.autocommit() as pg, pg.cursor() as cur:
        await cur.execute(_SWEEP_SQL)
        return cur.rowcount


class SharedFailureCounts:
    """The failure budget of every address and key prefix, shared through the database, with this
    process's note of who is refused until when, and its own counts while the database is away."""

    def __init__(
        self,
        db: Database,
        limit: int,
        window_s: float,
        max_tracked: int = MAX_TRACKED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.db = db
        self.limit = limit
        self.window_s = window_s
        self.clock = clock
        self._refused_until: dict[Kind, OrderedDict[str, float]] = {kind: OrderedDict() for kind in KINDS}
        self._max_tracked = max_tracked
        self._local = {kind: FailureCounts(limit, window_s, max_tracked, clock) for kind in KINDS}
        self._database_retry_at: float | None = None  # set while failures are counted in this process
        self._next_sweep = clock() + window_s

    async def add(self, subjects: Sequence[Subject]) -> Over | None:
        """Count one failed authentication of ``subjects``; :class:`Over` when any of them is past
        the limit (the failure is then to be refused), else None.

        A subject already known to be over the limit in this window refuses the failure at once,
        counting nothing: it is refused until its window ends whatever more it does.
        """
        subjects = [(kind, counted_as(who) if kind == "address" else who) for kind, who in subjects]
        now = self.clock()
        known = [wait for wait in (self._refused_for(subject, now) for subject in subjects) if wait > 0]
        if known:
            return Over(max(known), ())
        counts = await self._count(subjects, now)
        waits, newly = [], []
        for subject in subjects:
            n, left = counts[subject]
            if n > self.limit:
                waits.append(left)
                self._refuse(subject, now + left)
                if n == self.limit + 1:
                    newly.append(subject)
        return Over(max(waits), tuple(newly)) if waits else None

    def _refused_for(self, subject: Subject, now: float) -> float:
        """Seconds this process knows ``subject`` to be refused for (0 when it knows of nothing)."""
        kind, who = subject
        until = self._refused_until[kind].get(who)
        if until is None:
            return 0.0
        if until <= now:
            del self._refused_until[kind][who]
            return 0.0
        return until - now

    def _refuse(self, subject: Subject, until: float) -> None:
        kind, who = subject
        notes = self._refused_until[kind]
        notes.pop(who, None)
        notes[who] = until
        while len(notes) > self._max_tracked:
            notes.popitem(last=False)

    async def _count(self, subjects: Sequence[Subject], now: float) -> dict[Subject, tuple[int, float]]:
        if self._database_retry_at is not None and now < self._database_retry_at:
            return self._count_here(subjects)
        try:
            counts = await count(self.db, subjects, self.window_s)
        except (DatabaseUnavailable, psycopg.Error) as exc:
            if self._database_retry_at is None:
                log.warning(
                    "failed authentications counted in this process until the database answers: %s",
                    type(exc).__name__,
                )
            self._database_retry_at = now + DATABASE_RETRY_S
            return self._count_here(subjects)
        if self._database_retry_at is not None:
            self._database_retry_at = None
            log.info("failed authentications counted in the database again")
        if now >= self._next_sweep:
            self._next_sweep = now + self.window_s
            with contextlib.suppress(DatabaseUnavailable, psycopg.Error):
                await sweep(self.db)  # the next sweep, by this pod or another, deletes what this left
        return counts

    def _count_here(self, subjects: Sequence[Subject]) -> dict[Subject, tuple[int, float]]:
        return {(kind, who): self._local[kind].add(who) for kind, who in subjects}
