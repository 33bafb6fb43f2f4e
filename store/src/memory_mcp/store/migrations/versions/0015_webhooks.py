"""Per-space webhooks fed by the audit event store.

Events go out one at a time per webhook, in the order of (``txid``, ``id``): the writing
transaction, then the event. Only events of transactions older than every transaction still
running are taken (the transactional outbox rule): any event committed later has a larger
``txid``, so the cursor (``after_txid``, ``after_event``: the last event delivered or
dead-lettered) never passes an event that has yet to commit, as a cursor on ids alone would.

Revision ID: 0015
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE audit_events ADD COLUMN txid xid8 NOT NULL DEFAULT pg_current_xact_id();
        CREATE INDEX audit_events_space ON audit_events (space_id, txid, id) WHERE space_id IS NOT NULL;
        CREATE TABLE webhooks (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            space_id uuid NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
            url text NOT NULL CHECK (length(url) <= 2000),
            secret text NOT NULL,
            after_txid xid8 NOT NULL,
            after_event bigint NOT NULL,
            attempts integer NOT NULL DEFAULT 0,
            next_attempt_at timestamptz NOT NULL DEFAULT now(),
            created_at timestamptz NOT NULL DEFAULT now(),
            UNIQUE (space_id, url)
        );
        CREATE TABLE webhook_dead_letters (
            id bigserial PRIMARY KEY,
            webhook_id uuid NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
            event_id bigint NOT NULL,
            attempts integer NOT NULL,
            error text NOT NULL,
            failed_at timestamptz NOT NULL DEFAULT now()
        );
        """
    )


def downgrade() -> None:
    op.execute(
        "DROP TABLE webhook_dead_letters, webhooks; DROP INDEX audit_events_space; "
        "ALTER TABLE audit_events DROP COLUMN txid"
    )
