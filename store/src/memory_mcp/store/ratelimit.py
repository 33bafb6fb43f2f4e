"""Request rate limits per API key: a token bucket in PostgreSQL, shared by every server pod.

Each limited key has one row in ``key_rate_buckets``. One statement refills the bucket for the
time since the key's last request (``requestsPerMinute / 60`` tokens a second, at most ``burst``)
and spends a token if there is one; the row lock of that upsert orders concurrent requests of one
key across pods, so the limit holds however many pods serve it. Keys without a limit cost nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg.rows import namedtuple_row

from .db import Database
from .errors import RateLimited, ValidationError
from .models import ApiKey

MAX_REQUESTS_PER_MINUTE = 1_000_000

# ``level``: the tokens in the bucket now, before this request spends one.
_LEVEL = "LEAST(%(burst)s, b.tokens + extract(epoch FROM now() - b.at) * %(rate)s / 60.0)"
_SPEND_SQL = (
    "INSERT INTO key_rate_buckets AS b (key_id, tokens, allowed, at) "
    "VALUES (%(k)s, %(burst)s - 1, true, now()) "
    "ON CONFLICT (key_id) DO UPDATE SET "
    f"tokens = {_LEVEL} - CASE WHEN {_LEVEL} >= 1 THEN 1 ELSE 0 END, "
    f"allowed = {_LEVEL} >= 1, at = now() "
    "RETURNING allowed, tokens"
)


@dataclass(frozen=True)
class RateLimit:
    """``requestsPerMinute`` (the steady rate) and ``burst`` (the most requests at once)."""

    requests_per_minute: int
    burst: int

    @classmethod
    def parse(cls, requests_per_minute: object, burst: object = None, field: str = "rateLimit") -> RateLimit:
        """Checked values; ``burst`` defaults to the rate (a minute's worth at once)."""
        rate = _positive(requests_per_minute, f"{field}.requestsPerMinute")
        return cls(rate, rate if burst is None else _positive(burst, f"{field}.burst"))


def _positive(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REQUESTS_PER_MINUTE:
        raise ValidationError(field, f"must be an integer from 1 to {MAX_REQUESTS_PER_MINUTE}")
    return value


async def spend(db: Database, key: ApiKey) -> None:
    """Spend one request of ``key``'s budget, or raise :class:`RateLimited` with the wait.

    A refused request spends nothing, so a client that backs off for ``Retry-After`` gets through.
    """
    if key.rate_per_minute is None:
        return
    rate = key.rate_per_minute
    burst = key.rate_burst or rate
    async with db.autocommit() as pg, pg.cursor(row_factory=namedtuple_row) as cur:
        await cur.execute(_SPEND_SQL, {"k": key.id, "rate": rate, "burst": burst})
        row: Any = await cur.fetchone()
    assert row is not None
    if not row.allowed:
        raise RateLimited((1 - row.tokens) * 60.0 / rate, rate)
