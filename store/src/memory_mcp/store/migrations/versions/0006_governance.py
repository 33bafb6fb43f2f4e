"""Team governance: write policy, the Curate grant, proposed and rejected memories, byte quotas, shared rate limits.

A proposal is a memory row that is not latest (``is_latest = false``) with ``review = 'proposed'``.
Search, the profile and every other reader of live memories keep their one predicate
(``is_latest AND forgotten_at IS NULL``) and its indexes: a proposal is not live until a curator
accepts it, which sets ``is_latest``. A rejected proposal stays as history (``review = 'rejected'``).
A forget proposal marks a live memory (``forget_review = 'proposed'``); the memory stays live until
the forget is accepted.

Rate limits are token buckets, one row per limited key, refilled and spent by one statement per
request, so every server pod sees the same bucket. The table is UNLOGGED: a bucket is worth no
WAL flush (logged, each check waited for one: 2.9 ms a check on a 2-core development machine,
unlogged 0.4-0.7 ms; ``bench/ratelimit.py``), and after a crash or a failover the buckets simply
start full again.

Revision ID: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

REVIEW_STATES = "('proposed', 'accepted', 'rejected')"


def upgrade() -> None:
    op.execute(
        f"""
        ALTER TABLE spaces
            ADD COLUMN write_policy text NOT NULL DEFAULT 'Direct' CHECK (write_policy IN ('Direct', 'Review')),
            ADD COLUMN max_bytes bigint CHECK (max_bytes >= 0);
        ALTER TABLE key_grants DROP CONSTRAINT key_grants_access_check;
        ALTER TABLE key_grants ADD CONSTRAINT key_grants_access_check
            CHECK (access IN ('Read', 'ReadWrite', 'Curate'));
        ALTER TABLE api_keys
            ADD COLUMN rate_per_minute integer CHECK (rate_per_minute > 0),
            ADD COLUMN rate_burst integer CHECK (rate_burst > 0);
        CREATE UNLOGGED TABLE key_rate_buckets (
            key_id uuid PRIMARY KEY REFERENCES api_keys(id) ON DELETE CASCADE,
            tokens double precision NOT NULL,
            allowed boolean NOT NULL,
            at timestamptz NOT NULL
        );
        ALTER TABLE memories
            ADD COLUMN review text CHECK (review IN {REVIEW_STATES}),
            ADD COLUMN reviewed_by_user_id uuid REFERENCES users(id),
            ADD COLUMN reviewed_at timestamptz,
            ADD COLUMN review_reason text CHECK (length(review_reason) <= 500),
            ADD COLUMN forget_review text CHECK (forget_review IN {REVIEW_STATES}),
            ADD COLUMN forget_proposed_by_user_id uuid REFERENCES users(id),
            ADD COLUMN forget_proposed_at timestamptz,
            ADD CONSTRAINT memories_proposal_not_live CHECK (review IS DISTINCT FROM 'proposed' OR NOT is_latest);
        CREATE UNIQUE INDEX memories_proposed_content ON memories (space_id, content_hash)
            WHERE review = 'proposed';
        CREATE INDEX memories_pending_review ON memories (space_id, created_at DESC)
            WHERE review = 'proposed' OR forget_review = 'proposed';
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP INDEX memories_pending_review;
        DROP INDEX memories_proposed_content;
        DELETE FROM memories WHERE review IN ('proposed', 'rejected');
        ALTER TABLE memories
            DROP CONSTRAINT memories_proposal_not_live,
            DROP COLUMN forget_proposed_at, DROP COLUMN forget_proposed_by_user_id, DROP COLUMN forget_review,
            DROP COLUMN review_reason, DROP COLUMN reviewed_at, DROP COLUMN reviewed_by_user_id,
            DROP COLUMN review;
        DROP TABLE key_rate_buckets;
        ALTER TABLE api_keys DROP COLUMN rate_burst, DROP COLUMN rate_per_minute;
        UPDATE key_grants SET access = 'ReadWrite' WHERE access = 'Curate';
        ALTER TABLE key_grants DROP CONSTRAINT key_grants_access_check;
        ALTER TABLE key_grants ADD CONSTRAINT key_grants_access_check CHECK (access IN ('Read', 'ReadWrite'));
        ALTER TABLE spaces DROP COLUMN max_bytes, DROP COLUMN write_policy;
        """
    )
