"""How often searches returned each memory, in a narrow table of its own.

A search's profile (``includeProfile``, true by default over MCP) leads with the space's most
recalled statements. With the count a column of ``memories`` and no index on it (an index on a
column every search batch updates would take every update off its page: each would add an entry
to every index of the table, the HNSW graph included), finding them read the whole space and
sorted it: at 100,000 memories 80 ms of PostgreSQL a search, against 7 ms for the search itself.
Here the count has its index, ``(space_id, recall_count DESC, created_at)`` (the memory's
``created_at``, kept here too, orders equal counts oldest first as the profile does), and updating
it touches a row of five columns, not a memory's row of text and vectors: the memories' pages stay
as they were written.

Only memories recalled at least once have a row; the counts already kept move here, with the day
they were last recalled (a count without one gets the migration's time).

Revision ID: 0020
"""

from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

VISIBLE = "space_id = ANY ((SELECT memory_mcp_visible_spaces())::uuid[])"


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE memory_recalls (
            memory_id uuid PRIMARY KEY REFERENCES memories(id) ON DELETE CASCADE,
            space_id uuid NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
            recall_count integer NOT NULL CHECK (recall_count > 0),
            last_recalled_at timestamptz NOT NULL,
            created_at timestamptz NOT NULL
        );
        CREATE INDEX memory_recalls_space_count ON memory_recalls (space_id, recall_count DESC, created_at);
        """
    )
    # The owner reads every space's counts once: the policy of ``memories`` binds it too (FORCE).
    op.execute("ALTER TABLE memories NO FORCE ROW LEVEL SECURITY")
    op.execute(
        "INSERT INTO memory_recalls (memory_id, space_id, recall_count, last_recalled_at, created_at)"
        " SELECT id, space_id, recall_count, coalesce(last_recalled_at, now()), created_at FROM memories"
        " WHERE recall_count > 0"
    )
    op.execute("ALTER TABLE memories FORCE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE memories DROP COLUMN recall_count, DROP COLUMN last_recalled_at")
    op.execute("ALTER TABLE memory_recalls ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE memory_recalls FORCE ROW LEVEL SECURITY")
    op.execute(f"CREATE POLICY space_isolation ON memory_recalls USING ({VISIBLE}) WITH CHECK ({VISIBLE})")


def downgrade() -> None:
    op.execute(
        "ALTER TABLE memories ADD COLUMN recall_count integer NOT NULL DEFAULT 0,"
        " ADD COLUMN last_recalled_at timestamptz"
    )
    for table in ("memories", "memory_recalls"):
        op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
    op.execute(
        "UPDATE memories m SET recall_count = r.recall_count, last_recalled_at = r.last_recalled_at"
        " FROM memory_recalls r WHERE r.memory_id = m.id"
    )
    op.execute("ALTER TABLE memories FORCE ROW LEVEL SECURITY")
    op.execute("DROP TABLE memory_recalls")
