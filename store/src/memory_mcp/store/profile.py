"""A space's profile: stable facts (long-lived, often recalled) plus recent memories, within a budget.

Only memories saved as statements count; pieces of documents are left to search.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from .db import Database
from .memories import LIVE, MEMORY_SELECT, memory_from_row
from .models import Memory, SpaceContext


@dataclass(frozen=True)
class Profile:
    space_key: str
    stable: list[Memory]
    recent: list[Memory]
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
_STATEMENTS = f"WHERE m.space_id = :s AND {LIVE} AND {_SAVED}"

_CANDIDATE = (
    MEMORY_SELECT.replace(
        "    FROM memories m", "    , coalesce(r.recall_count, 0) AS recalls\n    FROM memories m"
    )
    + "    LEFT JOIN memory_recalls r ON r.memory_id = m.id\n"
    + _STATEMENTS
)
# The most recalled first, the oldest first among equals: the first ``CANDIDATES`` of the space's
# recalled statements (down the index of ``memory_recalls``) with its ``CANDIDATES`` oldest (down
# ``memories_space_created``) hold them, since a statement never recalled comes after every
# recalled one. Neither part reads more of the space than it returns (ordering the whole space by
# its count read every memory: 80 ms at 100,000 memories).
_STABLE_SQL = (
    f"({_CANDIDATE} AND r.space_id = :s ORDER BY r.recall_count DESC, r.created_at ASC LIMIT {CANDIDATES})"
    f" UNION ALL ({_CANDIDATE} ORDER BY m.created_at ASC LIMIT {CANDIDATES})"
)
_RECENT_SQL = f"{MEMORY_SELECT} {_STATEMENTS} ORDER BY m.created_at DESC LIMIT {CANDIDATES}"


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
    async with db.transaction([ctx.space.id]) as conn:
        rows = {r.id: r for r in await conn.execute(text(_STABLE_SQL), {"s": ctx.space.id})}.values()
        stable_candidates = sorted(rows, key=lambda r: (-r.recalls, r.created_at))[:CANDIDATES]
        recent_candidates = list(await conn.execute(text(_RECENT_SQL), {"s": ctx.space.id}))

    # Rows until they are chosen: the budget holds a few lines of the hundred candidates.
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
        stable=[memory_from_row(r) for r in stable],
        recent=[memory_from_row(r) for r in recent],
        tokens=used if stable or recent else 0,
    )
