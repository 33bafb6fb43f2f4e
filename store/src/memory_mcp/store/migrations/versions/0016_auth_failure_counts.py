"""Failed authentications per client address and per key prefix, in fixed windows, one row per
(what, subject): the counts behind the 429 of ``/mcp``, ``/v1``, ``/token``, ``/revoke`` and the
sign-in page.

Held here rather than in each process so that the limit holds however many server pods share the
traffic; one upsert counts a failure, rolls an ended window and returns the count. A row holds
the end of its window rather than its start, so that expired rows are found without knowing the
window's length (pods may be configured apart for a while during a rollout). UNLOGGED, like
``key_rate_buckets``: a count is worth no WAL flush at every failure, and after a crash or a failover
the counts simply start again. Not space-scoped, so
no row-level security, like ``oauth_address_counts``; the app role's grants come from the
migration runner, as for every table.

Revision ID: 0016
"""

from __future__ import annotations

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE UNLOGGED TABLE auth_failure_counts (
            what text NOT NULL,
            subject text NOT NULL,
            window_ends_at timestamptz NOT NULL,
            count integer NOT NULL,
            PRIMARY KEY (what, subject)
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE auth_failure_counts")
