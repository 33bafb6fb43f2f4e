"""OAuth 2.1 beside API keys: clients, sign-ins awaiting consent, token families, codes, refresh
tokens and signing keys, all in PostgreSQL so that any server pod can finish a flow another began.

A token family is what one consent produced: the key it acts for, the spaces kept, the client and
the resource. Its authorization code, every refresh token rotated from it and every access token
signed for it carry the family's id, so revoking the family (a replayed code, a reused refresh
token, ``/revoke``, the key's revocation) stops all of them on the next request.

Revision ID: 0008
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TABLES = (
    "oauth_refresh_tokens",
    "oauth_codes",
    "oauth_families",
    "oauth_sign_ins",
    "oauth_clients",
    "oauth_signing_keys",
)


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE oauth_clients (
            client_id text PRIMARY KEY,
            kind text NOT NULL CHECK (kind IN ('dcr', 'cimd')),
            client_name text NOT NULL,
            redirect_uris text[] NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            fetched_at timestamptz NOT NULL DEFAULT now(),
            revoked_at timestamptz
        )
        """
    )
    op.execute(
        """
        CREATE TABLE oauth_sign_ins (
            id_hash text PRIMARY KEY,
            key_id uuid NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
            client_id text NOT NULL REFERENCES oauth_clients(client_id) ON DELETE CASCADE,
            redirect_uri text NOT NULL,
            code_challenge text NOT NULL,
            resource text NOT NULL,
            state text,
            expires_at timestamptz NOT NULL
        )
        """
    )
    op.execute(
        """
        CREATE TABLE oauth_families (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            client_id text NOT NULL REFERENCES oauth_clients(client_id) ON DELETE CASCADE,
            key_id uuid NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
            space_ids uuid[] NOT NULL,
            resource text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            revoked_at timestamptz,
            revoked_reason text
        )
        """
    )
    op.execute("CREATE INDEX oauth_families_key ON oauth_families (key_id) WHERE revoked_at IS NULL")
    op.execute("CREATE INDEX oauth_families_client ON oauth_families (client_id) WHERE revoked_at IS NULL")
    op.execute(
        """
        CREATE TABLE oauth_codes (
            code_hash text PRIMARY KEY,
            family_id uuid NOT NULL REFERENCES oauth_families(id) ON DELETE CASCADE,
            redirect_uri text NOT NULL,
            code_challenge text NOT NULL,
            expires_at timestamptz NOT NULL,
            used_at timestamptz
        )
        """
    )
    op.execute(
        """
        CREATE TABLE oauth_refresh_tokens (
            token_hash text PRIMARY KEY,
            family_id uuid NOT NULL REFERENCES oauth_families(id) ON DELETE CASCADE,
            created_at timestamptz NOT NULL DEFAULT now(),
            expires_at timestamptz NOT NULL,
            used_at timestamptz
        )
        """
    )
    op.execute("CREATE INDEX oauth_refresh_tokens_family ON oauth_refresh_tokens (family_id)")
    op.execute(
        """
        CREATE TABLE oauth_signing_keys (
            kid text PRIMARY KEY,
            private_pem text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            retired_at timestamptz
        )
        """
    )


def downgrade() -> None:
    for table in TABLES:
        op.execute(f"DROP TABLE {table}")
