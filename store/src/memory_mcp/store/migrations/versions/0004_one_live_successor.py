"""A version chain cannot fork: at most one latest successor per memory.

Two concurrent restatements of one memory could each supersede it, leaving two latest versions of
one fact. The save path now locks the memory it supersedes; this index makes a fork impossible
even so. Chains that already forked keep their newest successor as the latest version; the others
become history, as if that newest one had superseded them.

Revision ID: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        UPDATE memories m SET is_latest = false, updated_at = now()
        FROM (
          SELECT id, row_number() OVER (PARTITION BY supersedes_id ORDER BY created_at DESC, id DESC) AS n
          FROM memories WHERE supersedes_id IS NOT NULL AND is_latest
        ) forks
        WHERE m.id = forks.id AND forks.n > 1
        """
    )
    op.execute(
        "CREATE UNIQUE INDEX memories_one_live_successor ON memories (supersedes_id) "
        "WHERE supersedes_id IS NOT NULL AND is_latest"
    )


def downgrade() -> None:
    op.execute("DROP INDEX memories_one_live_successor")
