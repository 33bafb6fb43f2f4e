"""Leave room in each page of ``memories`` so recall-count updates stay on the page.

Searches add to ``recall_count`` of the memories they return, in batches. With full pages (the
default fillfactor of 100) four updates in five had to put the new row version on another page,
which adds an entry to every index of the table, the HNSW graph included, for a vector that did not
change: at 60 rows a batch that cost PostgreSQL 12 ms of CPU and grew a 1,000-memory table from
1.7 to 7.8 MB in 100 batches. With 20% of each page free the update is a heap-only tuple (HOT):
no index is touched and the old version is pruned in place (1 ms a batch, 99.8% HOT).

Pages written from now on keep the room; pages already full get it when the table is rewritten
(``VACUUM FULL memories``, see docs/operations.md).

Revision ID: 0003
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE memories SET (fillfactor = 80)")


def downgrade() -> None:
    op.execute("ALTER TABLE memories RESET (fillfactor)")
