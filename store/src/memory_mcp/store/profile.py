"""A space's profile: stable facts (long-lived, often recalled) plus recent memories, within a budget.

Only memories saved as statements count; pieces of documents are left to search.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row

from .db import Database, NativeStatement
from .memories import LIVE
from .models import SpaceContext


@dataclass(frozen=True)
class ProfileLine:
    """What a profile shows of a memory: the id the tools take, its text and its category."""

    id: uuid.UUID
    content: str
    category: str | None


@dataclass(frozen=True)
class Profile:
    space_key: str
    stable: list[ProfileLine]
    recent: list[ProfileLine]
    tokens: int


# What one profile line costs beyond its text (a short id and the quoting), and what the headings
# cost, in tokens: counted inside the budget, so the whole profile stays within it (cl100k on LoCoMo
# turns: with 6 and nothing for headings, a 250-token budget came out at 265).
LINE_TOKENS = 8
HEADING_TOKENS = 20


# Statements saved one by one, not pieces of a file or a long text (a piece has its place in its
# document): the last upload's closing pages say nothing about a space, and search finds them when
# they matter.
_SAVED = "m.char_start IS NULL"


CANDIDATES = 50  # of each part, read before the budget is spent
_STATEMENTS = f"WHERE m.space_id = %(s)s AND {LIVE} AND {_SAVED}"


def _candidates(part: int, recalls: str, joins: str, where: str, order: str) -> str:
    """One part's candidates: what a line shows, the part's number and the recall count; not the
    memory's whole row (its space, writers and place in a document), which no line shows."""
    return (
        f"(SELECT m.id, m.content, m.category, m.created_at, {part} AS part, {recalls} AS recalls"
        f" FROM memories m{joins} {_STATEMENTS}{where} ORDER BY {order} LIMIT {CANDIDATES})"
    )


# One statement on the driver's own connection (``Database.driver_transaction``): through SQLAlchemy,
# and in two statements, the profile cost a search twice the CPU it costs now. Stable: the
# most recalled first, the oldest first among equals, held by the first ``CANDIDATES`` of the
# space's recalled statements (part 1, down the index of ``memory_recalls``) with its
# ``CANDIDATES`` oldest (part 2, down ``memories_space_created``), since a statement never recalled
# comes after every recalled one. Neither part reads more of the space than it returns (ordering the
# whole space by its count read every memory: 80 ms at 100,000 memories). Recent (part 3): the
# newest.
_PROFILE = NativeStatement.of(
    " UNION ALL ".join(
        (
            _candidates(
                1,
                "r.recall_count",
                " JOIN memory_recalls r ON r.memory_id = m.id",
                " AND r.space_id = %(s)s",
                "r.recall_count DESC, r.created_at ASC",
            ),
            _candidates(
                2,
                "coalesce(r.recall_count, 0)",
                " LEFT JOIN memory_recalls r ON r.memory_id = m.id",
                "",
                "m.created_at ASC",
            ),
            _candidates(3, "0", "", "", "m.created_at DESC"),
        )
    )
)


def estimate_tokens(content: str) -> int:
    """Roughly four characters a token for English-like text; never less than one."""
    return max(1, (len(content) + 3) // 4)


async def build_profile(
    db: Database, ctx: SpaceContext, token_budget: int = 250, exclude: Collection[uuid.UUID] = ()
) -> Profile:
    """Half the budget for stable facts, the rest for recent ones (unused stable budget rolls over).

    Memories in ``exclude`` (what the answer shows already, e.g. the search results) are left out,
    and each line is counted with its overhead, so the profile never costs more than the budget.
    """
    async with (
        db.driver_transaction([ctx.space.id]) as pg,
        psycopg.AsyncRawCursor(pg, row_factory=namedtuple_row) as cur,
    ):
        await db.execute(cur, _PROFILE, {"s": ctx.space.id})
        rows: list[Any] = await cur.fetchall()
    stable_rows = {r.id: r for r in rows if r.part < 3}.values()
    stable_candidates = sorted(stable_rows, key=lambda r: (-r.recalls, r.created_at))[:CANDIDATES]
    recent_candidates = sorted((r for r in rows if r.part == 3), key=lambda r: r.created_at, reverse=True)

    used = HEADING_TOKENS
    stable: list[Any] = []
    recent: list[Any] = []
    recent_ids = {r.id for r in recent_candidates[:5]}
    for row in stable_candidates:
        # The newest few belong to "recent"; a fact must have been recalled or be older to be stable.
        if row.id in recent_ids or row.id in exclude:
            continue
        cost = estimate_tokens(row.content) + LINE_TOKENS
        if used + cost > token_budget // 2:
            continue  # one long memory must not keep shorter stable facts out
        stable.append(row)
        used += cost
    chosen = {r.id for r in stable}
    for row in recent_candidates:
        if row.id in chosen or row.id in exclude:
            continue
        cost = estimate_tokens(row.content) + LINE_TOKENS
        if used + cost > token_budget:
            continue
        recent.append(row)
        used += cost
    return Profile(
        space_key=ctx.space.key,
        stable=[ProfileLine(r.id, r.content, r.category) for r in stable],
        recent=[ProfileLine(r.id, r.content, r.category) for r in recent],
        tokens=used if stable or recent else 0,
    )
