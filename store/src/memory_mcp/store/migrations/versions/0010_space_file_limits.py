"""A space's own limits of one uploaded file: PDF pages and recording length.

``spec.quotas.maxPdfPages`` and ``spec.quotas.maxMediaSeconds`` (whole seconds) of a Space. NULL,
every row written before this revision included, means the server's settings
(``MEMORY_MCP_MAX_PDF_PAGES``, ``MEMORY_MCP_MAX_MEDIA_SECONDS``) apply. The document worker reads
them with the job it claims.

Revision ID: 0010
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE spaces
            ADD COLUMN max_pdf_pages integer CHECK (max_pdf_pages > 0),
            ADD COLUMN max_media_seconds integer CHECK (max_media_seconds > 0);
        """
    )


def downgrade() -> None:
    op.execute("ALTER TABLE spaces DROP COLUMN max_media_seconds, DROP COLUMN max_pdf_pages")
