"""Plain dataclasses the store returns; edges turn them into MCP/REST shapes."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Generic, TypeVar

from .access import Access, Role


@dataclass(frozen=True)
class User:
    id: uuid.UUID
    name: str
    email: str
    display_name: str
    role: Role
    active: bool


@dataclass(frozen=True)
class Space:
    id: uuid.UUID
    key: str
    display_name: str
    description: str
    deletion_policy: str
    write_policy: str = "Direct"  # Direct | Review: under Review, saves and forgets are proposals


@dataclass(frozen=True)
class ApiKey:
    id: uuid.UUID
    name: str
    prefix: str
    user_id: uuid.UUID
    default_space_id: uuid.UUID | None
    active_space_id: uuid.UUID | None
    expires_at: datetime | None
    revoked_at: datetime | None
    rate_per_minute: int | None = None  # requests a minute, refilled continuously; None: no limit
    rate_burst: int | None = None  # the most requests at once (the bucket's size)


@dataclass(frozen=True)
class Grant:
    space: Space
    access: Access  # as granted on the key
    effective: Access  # after the role ceiling


@dataclass(frozen=True)
class Caller:
    """The verified identity behind one request: who, with which key, allowed where."""

    user: User
    key: ApiKey
    grants: tuple[Grant, ...]

    def grant_for(self, space_id: uuid.UUID) -> Grant | None:
        return next((g for g in self.grants if g.space.id == space_id), None)

    @property
    def readable_space_ids(self) -> tuple[uuid.UUID, ...]:
        return tuple(g.space.id for g in self.grants)


@dataclass(frozen=True)
class SpaceContext:
    """The one space a request resolved to, with the caller's effective access there."""

    caller: Caller
    space: Space
    access: Access

    @property
    def can_write(self) -> bool:
        return self.access.can_write

    @property
    def can_curate(self) -> bool:
        return self.access.can_curate


@dataclass(frozen=True)
class SpaceSummary:
    space: Space
    access: Access
    document_count: int
    memory_count: int
    last_activity: datetime | None
    active: bool


@dataclass(frozen=True)
class Document:
    id: uuid.UUID
    space_key: str
    title: str
    doc_type: str
    status: str
    summary: str
    size_bytes: int
    created_at: datetime
    updated_at: datetime
    created_by_user_id: uuid.UUID | None
    created_by: str | None
    updated_by_user_id: uuid.UUID | None
    updated_by: str | None
    content: str | None = None  # only filled when one document is read (one page of it)
    memory_ids: tuple[uuid.UUID, ...] = ()
    source: str = "memory"  # memory (one saved memory), text (a long add_memory) or file (an upload)
    media_type: str | None = None
    file_name: str | None = None
    category: str | None = None
    progress: float = 1.0  # 0..1 while a file is extracted
    error: str | None = None  # why extraction failed
    metadata: dict[str, object] = field(default_factory=dict)
    forgotten_at: datetime | None = None
    memory_count: int = 0
    page_count: int = 1  # pages of content (getDocument shows one at a time)
    page: int = 1  # the page ``content`` holds


@dataclass(frozen=True)
class Memory:
    id: uuid.UUID
    space_key: str
    document_id: uuid.UUID
    content: str
    category: str | None
    version: int
    supersedes_id: uuid.UUID | None
    is_latest: bool
    forgotten_at: datetime | None
    created_at: datetime
    updated_at: datetime
    created_by_user_id: uuid.UUID | None
    created_by: str | None
    updated_by_user_id: uuid.UUID | None
    updated_by: str | None
    has_embedding: bool = False
    # Where in its document the memory comes from (documents split into several memories).
    char_start: int | None = None
    char_end: int | None = None
    page: int | None = None
    start_s: float | None = None
    end_s: float | None = None
    review: str | None = None  # proposed | accepted | rejected: a save under review
    reviewed_by: str | None = None  # who accepted or rejected it
    reviewed_at: datetime | None = None
    review_reason: str | None = None
    forget_review: str | None = None  # proposed | accepted | rejected: a forget under review
    forget_proposed_by: str | None = None
    expires_at: datetime | None = None  # no longer live from then on (the purge job retires it later)

    @property
    def status(self) -> str:
        """live, proposed, rejected, superseded, forgotten or expired (see ``memories.MEMORY_STATUSES``)."""
        if self.review in ("proposed", "rejected"):
            return self.review
        if self.forgotten_at is not None:
            return "forgotten"
        if not self.is_latest:
            return "superseded"
        if self.expires_at is not None and self.expires_at <= datetime.now(UTC):
            return "expired"
        return "live"


@dataclass(frozen=True)
class SaveResult:
    memory: Memory
    created: bool  # False: exact duplicate of a live memory, which is returned instead
    superseded: Memory | None = None
    proposed: bool = False  # under Review: the memory waits for a curator (``memory.review``)
    replayed: bool = False  # a repeat of an earlier save's idempotency key: that save's result
    similar: tuple[Memory, float] | None = None  # a live memory this new one may restate, and its cosine


@dataclass(frozen=True)
class ForgetResult:
    forgotten: Memory | None
    candidates: tuple[Memory, ...] = ()  # when ambiguous, nothing is forgotten
    already: bool = False  # the memory had been forgotten before (by this or a concurrent request)
    proposed: bool = False  # under Review: a forget proposal was recorded; the memory is still live
    dry_run: bool = False  # ``forgotten`` is what would be forgotten; nothing changed


T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    page: int
    limit: int
    total: int
    has_more: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "has_more", self.page * self.limit < self.total)
