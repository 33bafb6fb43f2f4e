"""How many live memories a space holds, read from an index: the full-text weights' space size.

Search weighs a query word by its inverse document frequency, which needs the number of live
memories of the space, counted up to ``SearchParams.space_cap`` (``search._fulltext_sql``). Live
means latest, unforgotten and unexpired: the expiry is a condition on ``now()``, which no partial
index can hold, so the count read every memory's row. At 100,000 memories that count read 3,260
pages for its 10,000 rows, 15.6 of the fusion statement's 33 ms (EXPLAIN ANALYZE,
bench/search_cost.py). With the expiry in this partial index the count is an index-only scan.

Revision ID: 0019
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX memories_live_space ON memories (space_id, expires_at)"
        " WHERE is_latest AND forgotten_at IS NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX memories_live_space")
