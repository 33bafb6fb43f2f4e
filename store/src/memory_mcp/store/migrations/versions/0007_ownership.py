"""Command-line administration: who owns each space, user and key (apply/operator or the CLI).

``managed_by`` records which tool manages a row: ``manifest`` (``memory-mcp apply`` or the
operator, from a declared object) or ``cli`` (``memory-mcp space|user|key create``). Each tool
changes only its own rows, so the operator's resync never undoes a command-line change and the
command line never edits what a manifest declares. Every row that exists already was written by
the reconcilers or the first start before the command line existed: ``manifest``.

Revision ID: 0007
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TABLES = ("spaces", "users", "api_keys")


def upgrade() -> None:
    for table in TABLES:
        op.execute(
            f"ALTER TABLE {table} ADD COLUMN managed_by text NOT NULL DEFAULT 'manifest' "
            f"CONSTRAINT {table}_managed_by CHECK (managed_by IN ('manifest', 'cli'))"
        )


def downgrade() -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} DROP COLUMN managed_by")
