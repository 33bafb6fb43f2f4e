"""Prometheus metrics of every component, defined once so dashboards and alerts have one source.

Names are part of the operations contract (docs/operations.md lists them).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# --- server -------------------------------------------------------------------------------
TOOL_CALLS = Counter("memory_mcp_tool_calls_total", "MCP tool calls by tool and outcome", ["tool", "outcome"])
TOOL_DURATION = Histogram(
    "memory_mcp_tool_duration_seconds", "MCP tool call latency", ["tool"], buckets=LATENCY_BUCKETS
)
HTTP_REQUESTS = Counter(
    "memory_mcp_http_requests_total",
    "HTTP requests by route, method and status",
    ["route", "method", "status"],
)
HTTP_DURATION = Histogram(
    "memory_mcp_http_request_duration_seconds",
    "HTTP request latency",
    ["route", "method"],
    buckets=LATENCY_BUCKETS,
)
SEARCHES = Counter("memory_mcp_search_total", "Searches by the modes that ran", ["mode"])
SEARCH_FALLBACKS = Counter(
    "memory_mcp_search_fallbacks_total", "Searches that fell back to full text", ["reason"]
)
EMBEDDING_DURATION = Histogram(
    "memory_mcp_embedding_duration_seconds",
    "Time the server waited for embeddings",
    ["backend"],
    buckets=LATENCY_BUCKETS,
)
EMBEDDING_FAILURES = Counter(
    "memory_mcp_embedding_failures_total", "Embedding calls that failed", ["backend"]
)
SECRET_REFUSALS = Counter("memory_mcp_secret_refusals_total", "Writes refused as credentials", ["kind"])
AUTH_FAILURES = Counter("memory_mcp_auth_failures_total", "Requests refused at authentication", ["reason"])
OAUTH_EVENTS = Counter(
    "memory_mcp_oauth_events_total",
    "OAuth events: consent, denied, token_issued, refreshed, refresh_reused, code_replayed, revoked, "
    "client_registered, cimd_fetched, cimd_refused_address",
    ["event"],
)
OAUTH_ERRORS = Counter(
    "memory_mcp_oauth_errors_total",
    "OAuth requests refused, by endpoint and RFC error code",
    ["endpoint", "error"],
)
DB_POOL_SIZE = Gauge("memory_mcp_db_pool_size", "Configured database connections in the pool")
DB_POOL_IN_USE = Gauge("memory_mcp_db_pool_in_use", "Database connections checked out of the pool")
MEMORIES_PENDING_EMBEDDING = Gauge(
    "memory_mcp_memories_pending_embedding", "Memories saved without a vector, waiting for backfill"
)
PROPOSALS = Counter(
    "memory_mcp_proposals_total",
    "Proposals in Review spaces by what was proposed (save, forget) and the state reached "
    "(proposed, accepted, rejected)",
    ["proposal", "state"],
)
REVIEW_LATENCY = Histogram(
    "memory_mcp_review_latency_seconds",
    "Time from a proposal to its acceptance or rejection",
    ["decision"],
    buckets=(60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400),
)
RATE_LIMITED = Counter(
    "memory_mcp_rate_limited_total", "Requests refused with 429 by the rate limit of their API key"
)
DOCUMENTS_QUEUE_DEPTH = Gauge(
    "memory_mcp_documents_queue_depth", "Documents waiting for extraction or being extracted, all spaces"
)
DOCUMENT_JOB_DURATION = Histogram(
    "memory_mcp_document_job_duration_seconds",
    "Time from claiming a document job to its end, by file kind and outcome",
    ["kind", "outcome"],
    buckets=(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0),
)
DOCUMENT_JOB_FAILURES = Counter(
    "memory_mcp_document_job_failures_total",
    "Documents whose extraction failed, by file kind and reason",
    ["kind", "reason"],
)

# --- embedder -----------------------------------------------------------------------------
EMBEDDER_BATCH_SIZE = Histogram(
    "memory_mcp_embedder_batch_size",
    "Sentences per forward pass",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
)
EMBEDDER_QUEUE_WAIT = Histogram(
    "memory_mcp_embedder_queue_wait_seconds", "Time a request waited for its batch", buckets=LATENCY_BUCKETS
)
EMBEDDER_ENCODE = Histogram(
    "memory_mcp_embedder_encode_seconds", "Forward-pass time per batch", buckets=LATENCY_BUCKETS
)
EMBEDDER_QUEUE_DEPTH = Gauge("memory_mcp_embedder_queue_depth", "Sentences waiting to be embedded")
EMBEDDER_PRECISION = Gauge(
    "memory_mcp_embedder_precision",
    "1 for the number format the embedding model runs in (fp32, or bf16 where the start-up probe "
    "found it faster and equal), 0 for the other",
    ["mode"],
)
EMBEDDER_REQUESTS = Counter(
    "memory_mcp_embedder_requests_total", "Embedding requests by outcome", ["outcome"]
)

# --- operator -----------------------------------------------------------------------------
RECONCILES = Counter("memory_mcp_reconcile_total", "Reconciles by kind and outcome", ["kind", "outcome"])
RECONCILE_ERRORS = Counter(
    "memory_mcp_reconcile_errors_total", "Failed reconciles by kind and reason", ["kind", "reason"]
)
RECONCILE_DURATION = Histogram(
    "memory_mcp_reconcile_duration_seconds", "Reconcile latency", ["kind"], buckets=LATENCY_BUCKETS
)
OPERATOR_RESTARTS = Counter(
    "memory_mcp_operator_restarts_total",
    "Times kopf stopped on an error (a watch refused, a resource gone) and the operator started it again",
    ["error"],
)
