"""Per-address counts of the OAuth server's unauthenticated work: client registrations and fetches
of client metadata documents, in fixed windows, one row per (what, address).

Held here rather than in each process so that a limit holds however many server pods share the
traffic (a client behind a load balancer reaches all of them). One upsert counts a request and
says whether it is over; the row lock orders the requests of one address across pods.

Revision ID: 0014
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE oauth_address_counts (
            what text NOT NULL,
            address text NOT NULL,
            started_at timestamptz NOT NULL,
            count integer NOT NULL,
            PRIMARY KEY (what, address)
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE oauth_address_counts")
