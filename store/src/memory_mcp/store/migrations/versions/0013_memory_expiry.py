"""Memories that expire: ``expires_at``, after which a memory is no longer live.

Readers of live memories add ``expires_at IS NULL OR expires_at > now()`` to their predicate
(``memories.LIVE``), so an expired memory leaves search, listings and counts at once; the purge job
retires it for good after a grace period, through this index of the memories that have a date.

Revision ID: 0013
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE memories ADD COLUMN expires_at timestamptz;
        CREATE INDEX memories_expiring ON memories (expires_at)
            WHERE expires_at IS NOT NULL AND forgotten_at IS NULL AND is_latest;
        """
    )


def downgrade() -> None:
    op.execute("DROP INDEX memories_expiring; ALTER TABLE memories DROP COLUMN expires_at")
