"""Where search finds a memory's neighbours: the memories saved just before and after it.

Search adds to each candidate a share of its neighbours' scores (``SearchParams.context_weight``):
the piece of a document beside it, or the memory its writer saved on its own just before or after
it. Each lookup is one step down one of these partial indexes over live memories: pieces by their
document and position, single memories by space, writer and time.

Revision ID: 0011
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE INDEX memories_document_position ON memories (document_id, char_start)
            WHERE is_latest AND forgotten_at IS NULL AND char_start IS NOT NULL;
        CREATE INDEX memories_writer_sequence ON memories (space_id, created_by_user_id, created_at)
            WHERE is_latest AND forgotten_at IS NULL AND char_start IS NULL;
        """
    )


def downgrade() -> None:
    op.execute("DROP INDEX memories_writer_sequence, memories_document_position")
