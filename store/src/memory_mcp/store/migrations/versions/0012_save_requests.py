"""Idempotent saves and duplicates told by their folded text.

``save_requests`` holds one row per (API key, idempotency key): the space of the save that claimed
it and what that save made (or found). The claim is the primary key, taken by the save's own transaction before it writes anything,
so of two saves with one key (two pods, two transactions) the second waits for the first to commit
and then reads its result; a claim older than the window is taken over by the next save.

``memories_live_folded`` finds a live memory by its text with runs of whitespace made one space and
letters lower-cased (``memories.FOLDED``), so "Deploys run on  Fridays." and "deploys run on fridays."
are one memory.

Revision ID: 0012
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        r"""
        CREATE TABLE save_requests (
            key_id uuid NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
            idempotency_key text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
            space_id uuid NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
            memory_id uuid REFERENCES memories(id) ON DELETE SET NULL,
            superseded_id uuid REFERENCES memories(id) ON DELETE SET NULL,
            outcome text,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (key_id, idempotency_key)
        );
        CREATE INDEX save_requests_created ON save_requests (created_at);
        CREATE INDEX memories_live_folded
            ON memories (space_id, md5(lower(btrim(regexp_replace(content, '\s+', ' ', 'g')))))
            WHERE is_latest AND forgotten_at IS NULL;
        """
    )


def downgrade() -> None:
    op.execute("DROP INDEX memories_live_folded; DROP TABLE save_requests")
