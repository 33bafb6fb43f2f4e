"""Evaluate the visible-spaces list once per query instead of once per row.

Wrapping the function in a scalar subquery makes PostgreSQL compute it as an init-plan: the
comma-separated setting is parsed once, not for every row a scan touches.

Revision ID: 0002
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SPACE_SCOPED = ("documents", "memories")


def _policy(expression: str) -> None:
    for table in SPACE_SCOPED:
        op.execute(
            f"ALTER POLICY space_isolation ON {table} "
            f"USING (space_id = ANY ({expression})) WITH CHECK (space_id = ANY ({expression}))"
        )


def upgrade() -> None:
    _policy("(SELECT memory_mcp_visible_spaces())::uuid[]")


def downgrade() -> None:
    _policy("memory_mcp_visible_spaces()")
