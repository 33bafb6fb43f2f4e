"""A space's profile: stable facts (long-lived, often recalled) plus recent memories, within a budget.

Only memories saved as statements count; pieces of documents are left to search.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass

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
        candidates = f"{MEMORY_SELECT} WHERE m.space_id = :s AND {LIVE} AND {_SAVED}"
        stable_rows = await conn.execute(
            text(f"{candidates} ORDER BY m.recall_count DESC, m.created_at ASC LIMIT 50"), {"s": ctx.space.id}
        )
        stable_candidates = [memory_from_row(r) for r in stable_rows]
        recent_rows = await conn.execute(
            text(f"{candidates} ORDER BY m.created_at DESC LIMIT 50"), {"s": ctx.space.id}
        )
        recent_candidates = [memory_from_row(r) for r in recent_rows]

    used = HEADING_TOKENS
    stable: list[Memory] = []
    recent: list[Memory] = []
    recent_ids = {m.id for m in recent_candidates[:5]}
    for memory in stable_candidates:
        # The newest few belong to "recent"; a fact must have been recalled or be older to be stable.
        if memory.id in recent_ids or memory.id in exclude:
            continue
        cost = estimate_tokens(memory.content) + LINE_TOKENS
        if used + cost > token_budget // 2:
            continue  # one long memory must not keep shorter stable facts out
        stable.append(memory)
        used += cost
    chosen = {m.id for m in stable}
    for memory in recent_candidates:
        if memory.id in chosen or memory.id in exclude:
            continue
        cost = estimate_tokens(memory.content) + LINE_TOKENS
        if used + cost > token_budget:
            continue
        recent.append(memory)
        used += cost
    return Profile(
        space_key=ctx.space.key, stable=stable, recent=recent, tokens=used if stable or recent else 0
    )
