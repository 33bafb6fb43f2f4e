"""Documents from files: the extraction job queue, document progress and pages, memory offsets, upload tokens.

Revision ID: 0005
"""

from __future__ import annotations

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
