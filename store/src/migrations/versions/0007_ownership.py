"""Command-line administration: who owns each space, user and key (apply/operator or the CLI).

Revision ID: 0007
"""

from __future__ import annotations

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
