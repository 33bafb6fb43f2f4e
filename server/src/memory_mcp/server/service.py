"""The one implementation behind both surfaces (MCP tools and REST): resolve, embed, call the store."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections import Counter
from datetime import UTC, date, datetime
from typing import Literal

from memory_mcp.core import metrics
from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import Embedder, EmbedderUnavailable
from memory_mcp.embedder.static import StaticModel
from memory_mcp.store import (
    documents,
    identity,
    lean,
    memories,
    oauth,
    oauth_keys,
    pipeline,
    profile,
    ratelimit,
    search,
    uploads,
    validation,
)
from memory_mcp.store.db import Database
from memory_mcp.store.errors import RateLimited, SecretRefused, ValidationError
from memory_mcp.store.models import Caller, SaveResult, SpaceContext
from memory_mcp.store.search import SearchHit
from memory_mcp.store.secrets import find_secret

from . import oidc
from .bearer import Resource
from .documents_worker import embed_batches
from .schemas import (
    AddOut,
    AddStatus,
    DocumentDetailOut,
    DocumentOut,
    DocumentsOut,
    ForgetDocumentOut,
    GrantOut,
    KeyOut,
    MemoriesOut,
    MemoryOut,
    PageInfo,
    ProfileItemOut,
    ProfileOut,
    SearchHitOut,
    SearchOut,
    SelectSpaceOut,
    SourceOut,
    SpaceOut,
    SpacesOut,
    UploadTokenOut,
    UserOut,
    WhoAmIOut,
)

log = logging.getLogger(__name__)


class RecallLog:
    """Counts which memories searches returned, flushed to the database in batches."""

    def __init__(self) -> None:
        self._pending: Counter[tuple[uuid.UUID, uuid.UUID]] = Counter()

    def add(self, space_id: uuid.UUID, memory_ids: list[uuid.UUID]) -> None:
        self._pending.update((space_id, memory_id) for memory_id in memory_ids)

    async def flush(self, db: Database) -> None:
        pending, self._pending = self._pending, Counter()
        await search.record_recalls(db, dict(pending))


class MemoryService:
    """Everything a caller can do, with the same rules whichever surface they came through."""

    def __init__(self, db: Database, embedder: Embedder | None, settings: Settings) -> None:
        self.db = db
        self.embedder = embedder
        self.settings = settings
        self.recalls = RecallLog()
        self.search_params = settings.search_params()
        # Access tokens stay valid for their lifetime, so a retired key verifies that much longer.
        self.oauth_keys = oauth_keys.SigningKeys(
            settings.oauth_signing_keys_dir, overlap_s=settings.oauth_access_token_ttl_s
        )
        # An external OpenID provider's keys, when one issues this server's tokens (server/oidc.py).
        self.issuer_keys = oidc.IssuerKeys(settings) if settings.oauth_issuer else None
        # The static model (search's third signal), set once it is loaded or distilled (app.py);
        # until then saves go without its vector (the backfill adds it) and search uses two signals.
        self.static: StaticModel | None = None

    async def authenticate(self, token: str | None, resource: Resource | None = None) -> Caller:
        """The verified caller, with one request spent from its key's rate limit (if it has one).

        ``token`` is an API key, or (with ``resource``, the server as this request sees it) an
        OAuth access token, worth at most the key it was granted from; with ``oauth_issuer`` set,
        an access token of that provider instead, worth the user's live keys together.
        """
        oauth_on = self.issuer_keys is not None or self.settings.oauth_enabled
        if token is None or resource is None or not oauth_on or not oauth.looks_like_jwt(token):
            caller = await identity.authenticate(self.db, token)  # an API key (or nothing)
        elif self.issuer_keys is not None:
            audiences = (
                (self.settings.oauth_audience,) if self.settings.oauth_audience else resource.audiences
            )
            caller = await oidc.caller_for_token(self.db, self.issuer_keys, token, audiences)
        else:
            caller = await oauth.caller_for_access_token(
                self.db, self.oauth_keys, token, issuer=resource.issuer, audiences=resource.audiences
            )
        try:
            await ratelimit.spend(self.db, caller.key)
        except RateLimited:
            metrics.RATE_LIMITED.inc()
            raise
        return caller

    async def check_upload_token(self, token: str, presenter: Caller | None) -> None:
        """Refuse an upload token that could not be spent now, before its upload is read; a token
        spends a request of its key's rate limit like the key itself (unless the request also
        presented that key, which spent one already)."""
        caller = await uploads.check_upload_token(self.db, token, presenter)
        if presenter is None:
            try:
                await ratelimit.spend(self.db, caller.key)
            except RateLimited:
                metrics.RATE_LIMITED.inc()
                raise

    # --- embeddings (never fatal) ---------------------------------------------------------------

    async def _embed(self, content: str, query: bool) -> tuple[list[float] | None, str | None]:
        """A vector, or None and the reason: a write or search must not fail because the embedder did."""
        if self.embedder is None:
            # Not connected: the server retries in the background (server/app.py).
            return None, "the embedder is not reachable"
        try:
            async with asyncio.timeout(self.settings.embedder_timeout_s):
                if query:
                    return await self.embedder.embed_query(content), None
                return (await self.embedder.embed([content]))[0], None
        except (EmbedderUnavailable, TimeoutError) as exc:
            log.warning("embedding failed: %s", exc)
            return None, f"embedder unavailable ({exc.__class__.__name__})"

    def _static_vector(self, text: str) -> list[float] | None:
        """The static model's vector of one text (about 0.1 ms: no thread), or None until it is loaded."""
        return None if self.static is None else self.static.vectors([text])[0]

    async def _static_vectors(self, texts: list[str]) -> list[list[float]]:
        """The static vectors of a document's pieces (in a thread: long pieces add up), or none
        until the model is loaded (the backfill adds them then)."""
        return [] if self.static is None else await asyncio.to_thread(self.static.vectors, texts)

    # --- tools ------------------------------------------------------------------------------------

    async def who_am_i(self, caller: Caller) -> WhoAmIOut:
        current = identity.current_grant(caller)
        return WhoAmIOut(
            user=UserOut(
                id=str(caller.user.id),
                email=caller.user.email,
                displayName=caller.user.display_name,
                role=caller.user.role.value,
            ),
            key=KeyOut(
                id=str(caller.key.id),
                name=caller.key.name,
                prefix=caller.key.prefix,
                expiresAt=caller.key.expires_at,
            ),
            grants=[
                GrantOut(space=g.space.key, granted=g.access.value, effective=g.effective.value)
                for g in caller.grants
            ],
            activeSpace=current.space.key if current else None,
        )

    async def list_spaces(self, caller: Caller) -> SpacesOut:
        summaries = await identity.list_spaces(self.db, caller)
        spaces = [SpaceOut.of(s) for s in summaries]
        active = next((s.key for s in spaces if s.active), None)
        return SpacesOut(spaces=spaces, count=len(spaces), activeSpace=active)

    async def select_space(self, caller: Caller, space: str) -> SelectSpaceOut:
        ctx = await identity.set_active_space(self.db, caller, space)
        return SelectSpaceOut(
            activeSpace=ctx.space.key,
            access=ctx.access.value,
            message=f"Active space is now '{ctx.space.key}' ({ctx.space.display_name}, {ctx.access.value}).",
        )

    async def search(
        self,
        caller: Caller,
        query: str | None = None,
        keyword: str | None = None,
        category: str | None = None,
        include_profile: bool = True,
        container_tag: str | None = None,
        limit: int = 10,
        max_tokens: int = validation.DEFAULT_ANSWER_TOKENS,
        since: date | None = None,
        until: date | None = None,
    ) -> SearchOut:
        """Ranked memories above the relevance floor, as many as ``max_tokens`` holds (the rest
        counted in ``more``), long pieces by their matching passage, and the profile; with ``since``
        and/or ``until``, only memories whose time overlaps those days."""
        ctx = identity.resolve_space(caller, container_tag)
        max_tokens = validation.answer_tokens(max_tokens)
        # Checked before the query is embedded (the store checks the same again).
        query = validation.optional_text(query, "query", validation.MAX_QUERY)
        keyword = validation.optional_text(keyword, "keyword", validation.MAX_KEYWORD)
        category = validation.category(category)
        if query is None and keyword is None and category is None:
            raise ValidationError("query", "give at least one of query, keyword or category")
        since, until = validation.time_range(since, until)
        vector, fallback = None, None
        if query is not None:
            vector, reason = await self._embed(query, query=True)
            if vector is None:
                fallback = f"semantic search unavailable: {reason}; results come from full-text search only"
                metrics.SEARCH_FALLBACKS.labels(reason="embedder_unavailable").inc()
        result = await search.search_memories(
            self.db,
            ctx,
            query,
            keyword,
            category,
            vector,
            limit,
            self.search_params,
            fallback,
            static_embedding=self._static_vector(query) if query is not None else None,
            word_matches=None if self.static is None else self.static.soft_matches,
            since=since,
            until=until,
        )
        for mode in result.modes:
            metrics.SEARCHES.labels(mode=mode).inc()
        relevant = lean.relevant(result.hits, has_query=query is not None)
        hits = [self._hit(h, query, keyword) for h in relevant]
        reserved = self.settings.profile_token_budget if include_profile else 0
        costs = [lean.estimate_tokens(h.content) + lean.LINE_TOKENS for h in hits]
        shown = lean.within_budget(costs, max_tokens - reserved - lean.HEADER_TOKENS)
        self.recalls.add(ctx.space.id, [h.memory.id for h in relevant[:shown]])
        out = SearchOut(
            space=ctx.space.key,
            results=hits[:shown],
            count=shown,
            matching=len(hits),
            modes=list(result.modes),
            fallback=result.fallback,
        )
        # A search that finds nothing says so and nothing else: the profile beside no results reads
        # as if it were the answer.
        if include_profile and relevant:
            out.profile = await self._profile(ctx, exclude=[h.memory.id for h in relevant[:shown]])
        return out

    @staticmethod
    def _hit(h: SearchHit, query: str | None, keyword: str | None) -> SearchHitOut:
        """A result as shown: a piece of a longer document by its matching passage."""
        source = SourceOut.of(h.memory)
        found = lean.passage(h.memory.content, query, keyword) if source is not None else None
        return SearchHitOut(
            id=str(h.memory.id),
            shortId=h.ref,
            content=found.text if found else h.memory.content,
            similarity=h.similarity,
            score=h.score,
            matching=h.matching,
            category=h.memory.category,
            version=h.memory.version if h.memory.version > 1 else None,
            documentId=str(h.memory.document_id),
            source=source,
            createdAt=h.memory.created_at,
            createdBy=h.memory.created_by,
        )

    async def _profile(self, ctx: SpaceContext, exclude: list[uuid.UUID] | None = None) -> ProfileOut:
        p = await profile.build_profile(self.db, ctx, self.settings.profile_token_budget, exclude or ())
        return ProfileOut(
            space=p.space_key,
            stable=[ProfileItemOut(id=str(m.id), content=m.content, category=m.category) for m in p.stable],
            recent=[ProfileItemOut(id=str(m.id), content=m.content, category=m.category) for m in p.recent],
            tokens=p.tokens,
        )

    async def profile(self, caller: Caller, container_tag: str | None = None) -> ProfileOut:
        return await self._profile(identity.resolve_space(caller, container_tag))

    async def add(
        self,
        caller: Caller,
        content: str | None,
        action: Literal["save", "forget"] = "save",
        category: str | None = None,
        container_tag: str | None = None,
        memory_id: str | None = None,
        *,
        idempotency_key: str | None = None,
        expires_at: datetime | None = None,
        reason: str | None = None,
        dry_run: bool = False,
    ) -> AddOut:
        """Save ``content`` (as the next version of ``memory_id`` when given), or forget a memory:
        exactly ``memory_id`` when given (``content`` is then not needed), else the one ``content``
        clearly designates. A save repeating ``idempotency_key`` returns the first save's result; one
        with ``expires_at`` is live until then. A forget keeps ``reason`` in its audit event and, with
        ``dry_run``, says what it would forget and changes nothing."""
        if action not in ("save", "forget"):
            raise ValidationError("action", "must be 'save' or 'forget'")
        idempotency_key = validation.idempotency_key(idempotency_key)
        expires_at = validation.expires_at(expires_at)
        ctx = identity.resolve_space(caller, container_tag)
        # The store checks again; checking here first refuses before any embedding work is spent.
        memories.require_write(ctx)
        if action == "forget":
            if content is None and memory_id is None:
                raise ValidationError("content", "give memoryId, or the text of the memory to forget")
            return await self._forget(ctx, content or "", memory_id, reason=reason, dry_run=dry_run)
        if content is None:
            raise ValidationError(
                "content", "required to save; to forget, give action=forget and memoryId (or the text)"
            )
        return await self._save(ctx, content, category, memory_id, idempotency_key, expires_at)

    async def _save(
        self,
        ctx: SpaceContext,
        content: str,
        category: str | None,
        memory_id: str | None = None,
        idempotency_key: str | None = None,
        expires_at: datetime | None = None,
    ) -> AddOut:
        if isinstance(content, str) and len(content.strip()) > validation.MAX_CONTENT:
            if memory_id is not None:
                raise ValidationError(
                    "content",
                    f"a new version of a memory is one memory: at most {validation.MAX_CONTENT} characters",
                )
            if expires_at is not None:
                raise ValidationError(
                    "expiresAt",
                    f"applies to one memory: content of at most {validation.MAX_CONTENT} characters",
                )
            return await self._save_document(ctx, content, category)
        try:
            # Refused input costs microseconds, not a forward pass.
            content, category = memories.checked_content(content, category)
        except SecretRefused as exc:
            metrics.SECRET_REFUSALS.labels(kind=exc.kind).inc()
            raise
        # A repeat is answered before the memory it named is looked up (it may be history since)
        # and before any embedding is spent.
        replay = await memories.replayed_save(self.db, ctx, idempotency_key)
        if replay is not None:
            return self._replayed(ctx, replay)
        previous = await memories.find_memory(self.db, ctx, memory_id) if memory_id is not None else None
        vector, reason = await self._embed(content, query=False)
        result = await memories.save_memory(
            self.db,
            ctx,
            content,
            category,
            vector,
            # Named explicitly, the memory is replaced whatever its likeness; otherwise only a near twin.
            supersede_threshold=None if previous else self.settings.supersede_threshold,
            similar_threshold=None if previous else self._similar_cosine,
            supersedes_id=previous.id if previous else None,
            static_embedding=self._static_vector(content),
            idempotency_key=idempotency_key,
            expires_at=expires_at,
        )
        if result.replayed:
            return self._replayed(ctx, result)
        memory = MemoryOut.of(result.memory)
        if result.proposed:
            return self._proposed(ctx, result.created, memory, vector is not None)
        if not result.created:
            return AddOut(
                action="save",
                status="already_exists",
                space=ctx.space.key,
                message=f"Already saved in space '{ctx.space.key}': returning the existing memory.",
                memory=memory,
                embedded=result.memory.has_embedding,
            )
        later = "" if vector is not None else f" It will be embedded for semantic search later ({reason})."
        if expires_at is not None:
            later = f" It is live until {expires_at.isoformat()}.{later}"
        if result.superseded is not None:
            return AddOut(
                action="save",
                status="updated",
                space=ctx.space.key,
                message=f"Saved version {memory.version} in space '{ctx.space.key}'; it supersedes the earlier "
                f"version, which stays in history.{later}",
                memory=memory,
                superseded=MemoryOut.of(result.superseded),
                embedded=vector is not None,
            )
        similar, hint = None, ""
        if result.similar is not None:
            near, cosine = result.similar
            similar, short = MemoryOut.of(near), memories.short_id(near.id)
            hint = (
                f" A similar memory is live (id {short}, similarity {self._scaled(cosine):.2f}): if this "
                f"replaces it, forget it (action=forget, memoryId={short}); to replace a memory in one "
                "step, save with its memoryId."
            )
        return AddOut(
            action="save",
            status="saved",
            space=ctx.space.key,
            message=f"Saved in space '{ctx.space.key}'.{later}{hint}",
            memory=memory,
            similar=similar,
            embedded=vector is not None,
        )

    @property
    def _similar_cosine(self) -> float:
        """``memories.SIMILAR_NAMED`` (on the default model's scale) as this model's cosine."""
        p = self.search_params
        return (memories.SIMILAR_NAMED - p.similarity_offset) / p.similarity_gain

    def _scaled(self, cosine: float) -> float:
        return self.search_params.similarity_gain * cosine + self.search_params.similarity_offset

    @staticmethod
    def _replayed(ctx: SpaceContext, result: SaveResult) -> AddOut:
        """A repeat of a save's idempotency key: the first save's result, the memories as they are now."""
        if result.proposed:
            status: AddStatus = "proposed" if result.created else "already_proposed"
        elif result.created:
            status = "updated" if result.superseded is not None else "saved"
        else:
            status = "already_exists"
        return AddOut(
            action="save",
            status=status,
            space=ctx.space.key,
            message=f"A repeat of an earlier save with this idempotencyKey in space '{ctx.space.key}': its "
            "result; nothing new was stored.",
            memory=MemoryOut.of(result.memory),
            superseded=MemoryOut.of(result.superseded) if result.superseded else None,
            embedded=result.memory.has_embedding,
            replayed=True,
        )

    def _proposed(self, ctx: SpaceContext, created: bool, memory: MemoryOut, embedded: bool) -> AddOut:
        """A save in a Review space: it waits for a curator and is not searched until accepted."""
        if created:
            metrics.PROPOSALS.labels(proposal="save", state="proposed").inc()
        short = memories.short_id(memory.id)
        return AddOut(
            action="save",
            status="proposed" if created else "already_proposed",
            space=ctx.space.key,
            message=(
                f"Proposed for review in space '{ctx.space.key}' (id {short}): a curator accepts or rejects "
                "it; it is not searchable until accepted."
                if created
                else f"Already proposed for review in space '{ctx.space.key}' (id {short}): it waits for a "
                "curator."
            ),
            memory=memory,
            embedded=embedded,
        )

    async def _forget(
        self,
        ctx: SpaceContext,
        content: str,
        memory_id: str | None = None,
        *,
        reason: str | None = None,
        dry_run: bool = False,
    ) -> AddOut:
        vector = None
        if memory_id is None:
            content = validation.content(content)
            if memories.id_range(content) is None:  # an id needs no meaning
                vector = (await self._embed(content, query=True))[0]
        result = await memories.forget_memory(
            self.db,
            ctx,
            content,
            vector,
            threshold=self.settings.forget_threshold,
            margin=self.settings.forget_margin,
            memory_id=memory_id,
            reason=reason,
            dry_run=dry_run,
        )
        if result.forgotten is not None and result.dry_run:
            return AddOut(
                action="forget",
                status="already_forgotten" if result.already else "would_forget",
                space=ctx.space.key,
                message=f"Dry run, nothing changed: this memory in space '{ctx.space.key}' was forgotten already:"
                if result.already
                else f"Dry run, nothing changed: a forget would forget this memory in space '{ctx.space.key}':",
                memory=MemoryOut.of(result.forgotten),
            )
        if result.forgotten is not None and result.proposed:
            if not result.already:
                metrics.PROPOSALS.labels(proposal="forget", state="proposed").inc()
            short = memories.short_id(result.forgotten.id)
            return AddOut(
                action="forget",
                status="forget_proposed",
                space=ctx.space.key,
                message=f"Forget proposed for review in space '{ctx.space.key}' (id {short}): the memory stays "
                "live until a curator accepts the forget:",
                memory=MemoryOut.of(result.forgotten),
            )
        if result.forgotten is not None:
            already = result.already
            return AddOut(
                action="forget",
                status="already_forgotten" if already else "forgotten",
                space=ctx.space.key,
                message=f"Nothing changed: this memory in space '{ctx.space.key}' was forgotten already:"
                if already
                else f"Forgot this memory in space '{ctx.space.key}' (history is kept):",
                memory=MemoryOut.of(result.forgotten),
            )
        if result.candidates:
            return AddOut(
                action="forget",
                status="ambiguous",
                space=ctx.space.key,
                message=f"Nothing was forgotten: no memory in space '{ctx.space.key}' is clearly the one meant; "
                f"{len(result.candidates)} candidate(s) below. Forget one by its memoryId.",
                candidates=[MemoryOut.of(m) for m in result.candidates],
            )
        return AddOut(
            action="forget",
            status="not_found",
            space=ctx.space.key,
            message=f"Nothing was forgotten: no memory in space '{ctx.space.key}' matches.",
        )

    async def list_documents(
        self, caller: Caller, page: int = 1, limit: int = 10, container_tag: str | None = None
    ) -> DocumentsOut:
        ctx = identity.resolve_space(caller, container_tag)
        result = await documents.list_documents(self.db, ctx, page, limit)
        return DocumentsOut(
            space=ctx.space.key,
            documents=[DocumentOut.of(d) for d in result.items],
            pagination=PageInfo.of(result),
        )

    async def get_document(self, caller: Caller, document_id: str, page: int = 1) -> DocumentDetailOut:
        return DocumentDetailOut.of_detail(await documents.get_document(self.db, caller, document_id, page))

    async def forget_document(self, caller: Caller, document_id: str) -> ForgetDocumentOut:
        result = await documents.forget_document(self.db, caller, document_id)
        doc = DocumentOut.of(result.document)
        where = f"document {memories.short_id(doc.id)} in space '{result.document.space_key}'"
        if result.already:
            return ForgetDocumentOut(
                status="already_forgotten",
                message=f"Nothing changed: {where} was forgotten already.",
                memoriesForgotten=0,
                document=doc,
            )
        return ForgetDocumentOut(
            status="forgotten",
            message=f"Forgot {where} and {result.memories_forgotten} of its memories (history is kept).",
            memoriesForgotten=result.memories_forgotten,
            document=doc,
        )

    async def prepare_upload(
        self, caller: Caller, container_tag: str | None, upload_url: str
    ) -> UploadTokenOut:
        """A one-time token for one upload into the space, by this key, and where to send it."""
        ctx = identity.resolve_space(caller, container_tag)
        token, expires_at = await uploads.create_upload_token(self.db, ctx)
        return UploadTokenOut(uploadUrl=upload_url, uploadToken=token, expiresAt=expires_at)

    async def _save_document(self, ctx: SpaceContext, content: str, category: str | None) -> AddOut:
        """Content longer than one memory: one document, split at paragraphs and sentences, embedded
        in batches, written in one transaction."""
        content = validation.document_text(content)
        category = validation.category(category)
        # The whole text (and the category) is checked for credentials before any of it is embedded.
        for name, value in (("category", category), ("content", content)):
            secret = await asyncio.to_thread(find_secret, value) if value else None
            if secret is not None:
                metrics.SECRET_REFUSALS.labels(kind=secret.kind).inc()
                raise SecretRefused(secret.kind, secret.label, field=name)
        contents = await asyncio.to_thread(pipeline.prepare_text, content)
        vectors = await embed_batches(
            self.embedder,
            [p.text for p in contents.pieces],
            self.settings.embedder_max_batch,
            self.settings.embedder_timeout_s,
        )
        statics = await self._static_vectors([p.text for p in contents.pieces])
        stored, made = await documents.save_text(
            self.db, ctx, category, dataclasses.replace(contents, vectors=vectors, static_vectors=statics)
        )
        doc = DocumentOut.of(stored.document)
        where = f"document {memories.short_id(doc.id)} in space '{ctx.space.key}'"
        if not stored.created:
            return AddOut(
                action="save",
                status="already_exists",
                space=ctx.space.key,
                message=f"Already saved as {where} ({made} memories): returning it.",
                document=doc,
            )
        embedded = all(v is not None for v in vectors)
        later = "" if embedded else " They will be embedded for semantic search later."
        if ctx.space.write_policy == "Review":
            metrics.PROPOSALS.labels(proposal="save", state="proposed").inc(made)
            return AddOut(
                action="save",
                status="proposed",
                space=ctx.space.key,
                message=f"Proposed for review as {where}: {made} memories, each waiting for a curator "
                "(listMemories with status proposed); not searchable until accepted.",
                document=doc,
                embedded=embedded,
            )
        return AddOut(
            action="save",
            status="saved",
            space=ctx.space.key,
            message=f"Saved as {where}: {made} memories, split at paragraphs and sentences.{later}",
            document=doc,
            embedded=embedded,
        )

    async def list_memories(
        self,
        caller: Caller,
        page: int = 1,
        limit: int = 10,
        container_tag: str | None = None,
        status: str = "live",
    ) -> MemoriesOut:
        ctx = identity.resolve_space(caller, container_tag)
        result = await memories.list_memories(self.db, ctx, page, limit, status)
        return MemoriesOut(
            space=ctx.space.key,
            memories=[MemoryOut.of(m) for m in result.items],
            pagination=PageInfo.of(result),
            status=status,
        )

    async def recent_memories(self, caller: Caller, limit: int = 20) -> MemoriesOut:
        ctx = identity.resolve_space(caller, None)
        items = await memories.recent_memories(self.db, ctx, limit)
        return MemoriesOut(
            space=ctx.space.key,
            memories=[MemoryOut.of(m) for m in items],
            pagination=PageInfo(page=1, limit=limit, total=len(items), hasMore=False),
            status="live",
        )

    async def context(self, caller: Caller) -> list[ProfileOut]:
        """Profile of the active space plus up to three other recently active spaces."""
        summaries = await identity.list_spaces(self.db, caller)
        active = [s for s in summaries if s.active]
        others = sorted(
            (s for s in summaries if not s.active and s.last_activity is not None),
            key=lambda s: s.last_activity or datetime.min.replace(tzinfo=UTC),
            reverse=True,
        )[:3]
        return [await self._profile(identity.resolve_space(caller, s.space.key)) for s in active + others]
