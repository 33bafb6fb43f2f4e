"""Documents from files: the extraction job queue, document progress and pages, memory offsets, upload tokens.

- ``documents`` learns where it came from (``source``: one memory, a long text, or a file), the
  file's name and media type, the category its memories get, extraction ``progress``, the
  ``pages`` of its content (character ranges, for paging a long document) and ``metadata``; and
  it can be forgotten as a whole. One live document per content hash and space for files and long
  texts: the same file uploaded twice is the same document.
- ``document_files`` holds an uploaded file until it is extracted, in 1 MiB pieces: every server
  pod can work the queue, so the file must live where they all can read it, and pieces keep both
  the upload and the worker from holding a 50 MB file in memory at once.
- ``document_jobs`` is the queue: claimed with ``FOR UPDATE SKIP LOCKED`` and held by a lease the
  worker renews; a job whose lease ran out (its worker died) is claimed again.
- ``memories`` learn where in their document they come from: character offsets, page, time range.
- ``upload_tokens``: one-time upload credentials, stored as hashes. Not space-scoped by row-level
  security, like ``api_keys``: a token is looked up by its hash before anyone knows its space.

Revision ID: 0005
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

SPACE_SCOPED = ("document_files", "document_jobs")
VISIBLE = "space_id = ANY ((SELECT memory_mcp_visible_spaces())::uuid[])"


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE documents
            ADD COLUMN source text NOT NULL DEFAULT 'memory' CHECK (source IN ('memory', 'text', 'file')),
            ADD COLUMN media_type text,
            ADD COLUMN file_name text CHECK (length(file_name) <= 255),
            ADD COLUMN category text CHECK (length(category) BETWEEN 1 AND 64),
            ADD COLUMN progress real NOT NULL DEFAULT 1 CHECK (progress BETWEEN 0 AND 1),
            ADD COLUMN pages jsonb NOT NULL DEFAULT '[]',
            ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}',
            ADD COLUMN forgotten_at timestamptz;
        CREATE UNIQUE INDEX documents_live_source ON documents (space_id, content_hash)
            WHERE source <> 'memory' AND forgotten_at IS NULL AND status <> 'failed';
        ALTER TABLE memories
            ADD COLUMN char_start integer CHECK (char_start >= 0),
            ADD COLUMN char_end integer CHECK (char_end >= char_start),
            ADD COLUMN page integer CHECK (page >= 1),
            ADD COLUMN start_s real CHECK (start_s >= 0),
            ADD COLUMN end_s real CHECK (end_s >= start_s);
        CREATE TABLE document_files (
            document_id uuid NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            space_id uuid NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
            seq integer NOT NULL CHECK (seq >= 0),
            data bytea NOT NULL,
            PRIMARY KEY (document_id, seq)
        );
        CREATE TABLE document_jobs (
            document_id uuid PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,
            space_id uuid NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
            attempts integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
            worker text,
            lease_until timestamptz,
            enqueued_at timestamptz NOT NULL DEFAULT now(),
            claimed_at timestamptz
        );
        CREATE INDEX document_jobs_order ON document_jobs (enqueued_at);
        CREATE TABLE upload_tokens (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            token_hash text NOT NULL UNIQUE,
            key_id uuid NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
            space_id uuid NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
            expires_at timestamptz NOT NULL,
            used_at timestamptz,
            created_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX upload_tokens_expires ON upload_tokens (expires_at);
        """
    )
    for table in SPACE_SCOPED:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY space_isolation ON {table} USING ({VISIBLE}) WITH CHECK ({VISIBLE})")


def downgrade() -> None:
    op.execute(
        """
        DROP TABLE upload_tokens, document_jobs, document_files;
        DROP INDEX documents_live_source;
        ALTER TABLE memories DROP COLUMN char_start, DROP COLUMN char_end, DROP COLUMN page,
            DROP COLUMN start_s, DROP COLUMN end_s;
        ALTER TABLE documents DROP COLUMN source, DROP COLUMN media_type, DROP COLUMN file_name,
            DROP COLUMN category, DROP COLUMN progress, DROP COLUMN pages, DROP COLUMN metadata,
            DROP COLUMN forgotten_at;
        """
    )
