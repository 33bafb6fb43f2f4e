"""Initial schema: spaces, users, keys, grants, documents, memories, audit events; RLS by space.

Revision ID: 0001
"""

from __future__ import annotations

from alembic import context, op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

SPACE_SCOPED = ("documents", "memories")


def upgrade() -> None:
    dim = int(context.config.attributes.get("embedding_dim", 384))
    op.execute(
        """
        CREATE FUNCTION memory_mcp_visible_spaces() RETURNS uuid[]
        LANGUAGE sql STABLE PARALLEL SAFE AS
        $$ SELECT string_to_array(NULLIF(current_setting('memory_mcp.spaces', true), ''), ',')::uuid[] $$
        """
    )
    op.execute(
        """
        CREATE TABLE spaces (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            key text NOT NULL UNIQUE
                CHECK (key ~ '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$' AND length(key) <= 63),
            display_name text NOT NULL,
            description text NOT NULL DEFAULT '',
            deletion_policy text NOT NULL DEFAULT 'Retain' CHECK (deletion_policy IN ('Retain', 'Delete')),
            max_memories integer CHECK (max_memories >= 0),
            max_documents integer CHECK (max_documents >= 0),
            detached_at timestamptz,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE users (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            name text NOT NULL UNIQUE,
            email text NOT NULL UNIQUE,
            display_name text NOT NULL,
            role text NOT NULL CHECK (role IN ('Writer', 'Reader')),
            active boolean NOT NULL DEFAULT true,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE api_keys (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            user_id uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            name text NOT NULL UNIQUE,
            prefix text NOT NULL UNIQUE,
            key_hash text NOT NULL,
            default_space_id uuid REFERENCES spaces(id) ON DELETE SET NULL,
            active_space_id uuid REFERENCES spaces(id) ON DELETE SET NULL,
            expires_at timestamptz,
            revoked_at timestamptz,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX api_keys_user ON api_keys (user_id);
        CREATE TABLE key_grants (
            key_id uuid NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
            space_id uuid NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
            access text NOT NULL CHECK (access IN ('Read', 'ReadWrite')),
            PRIMARY KEY (key_id, space_id)
        );
        CREATE INDEX key_grants_space ON key_grants (space_id);
        CREATE TABLE documents (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            space_id uuid NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
            title text NOT NULL,
            doc_type text NOT NULL,
            status text NOT NULL CHECK (status IN ('queued', 'processing', 'done', 'failed')),
            content text NOT NULL DEFAULT '',
            summary text NOT NULL DEFAULT '',
            size_bytes bigint NOT NULL DEFAULT 0,
            content_hash text NOT NULL,
            error text,
            created_by_user_id uuid REFERENCES users(id),
            updated_by_user_id uuid REFERENCES users(id),
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX documents_space_created ON documents (space_id, created_at DESC);
        """
    )
    op.execute(
        f"""
        CREATE TABLE memories (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            space_id uuid NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
            document_id uuid NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            content text NOT NULL CHECK (length(content) BETWEEN 1 AND 2000),
            content_hash text NOT NULL,
            category text CHECK (length(category) BETWEEN 1 AND 64),
            version integer NOT NULL DEFAULT 1 CHECK (version >= 1),
            supersedes_id uuid REFERENCES memories(id),
            is_latest boolean NOT NULL DEFAULT true,
            forgotten_at timestamptz,
            embedding halfvec({dim}),
            tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED,
            recall_count integer NOT NULL DEFAULT 0,
            last_recalled_at timestamptz,
            created_by_user_id uuid REFERENCES users(id),
            updated_by_user_id uuid REFERENCES users(id),
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX memories_embedding_hnsw ON memories USING hnsw (embedding halfvec_cosine_ops);
        CREATE INDEX memories_tsv ON memories USING gin (tsv);
        CREATE INDEX memories_content_trgm ON memories USING gin (content gin_trgm_ops);
        CREATE INDEX memories_space_created ON memories (space_id, created_at DESC);
        CREATE INDEX memories_space_category ON memories (space_id, category)
            WHERE is_latest AND forgotten_at IS NULL;
        CREATE INDEX memories_document ON memories (document_id);
        CREATE INDEX memories_pending_embedding ON memories (space_id) WHERE embedding IS NULL;
        CREATE UNIQUE INDEX memories_live_content ON memories (space_id, content_hash)
            WHERE is_latest AND forgotten_at IS NULL;
        CREATE TABLE audit_events (
            id bigserial PRIMARY KEY,
            at timestamptz NOT NULL DEFAULT now(),
            actor text NOT NULL,
            actor_user_id uuid,
            action text NOT NULL,
            space_id uuid,
            target_type text NOT NULL,
            target_id text NOT NULL,
            details jsonb NOT NULL DEFAULT '{{}}'
        );
        CREATE INDEX audit_events_at ON audit_events (at DESC);
        """
    )
    for table in SPACE_SCOPED:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        # FORCE: the owning role is bound by the policy too (single-role deployments).
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY space_isolation ON {table} "
            "USING (space_id = ANY (memory_mcp_visible_spaces())) "
            "WITH CHECK (space_id = ANY (memory_mcp_visible_spaces()))"
        )


def downgrade() -> None:
    op.execute(
        "DROP TABLE audit_events, memories, documents, key_grants, api_keys, users, spaces CASCADE; "
        "DROP FUNCTION memory_mcp_visible_spaces()"
    )
