"""The static embedding: search's third signal, a 384-wide vector of its own per memory.

A table distilled from the packaged MiniLM (model2vec) gives every memory, document pieces
included (they are memories), a second vector in another space than ``embedding``, in a column
of its own. Search scores the other signals' candidates with it and scans no index over it, so it
has none (an HNSW index would only slow every write). Rows written before this revision have none; ``memory-mcp
backfill`` and the server's background job compute them (cheap: thousands a second), and until
then such a row is found by the other two signals.

Revision ID: 0009
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE memories ADD COLUMN static_embedding halfvec(384);
        CREATE INDEX memories_pending_static ON memories (space_id) WHERE static_embedding IS NULL;
        """
    )


def downgrade() -> None:
    op.execute("ALTER TABLE memories DROP COLUMN static_embedding")
