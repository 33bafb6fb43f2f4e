"""Who manages each webhook: the command line, or a Space resource's ``spec.webhooks``.

``managed_by`` is ``cli`` (``memory-mcp webhook add``) or ``manifest`` (the operator, from the
Space's declared list). A resource owns the URLs it names and leaves the command line's alone;
the command line refuses to remove a declared one. Every webhook before this was added by the
command line.

Revision ID: 0017
"""

from __future__ import annotations

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE webhooks ADD COLUMN managed_by text NOT NULL DEFAULT 'cli' "
        "CONSTRAINT webhooks_managed_by CHECK (managed_by IN ('manifest', 'cli'))"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE webhooks DROP COLUMN managed_by")
