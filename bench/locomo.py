"""Recall on real conversations: the public LoCoMo benchmark, against plain baselines in the same run.

The data is ``data/locomo10.zip`` of the public repository ``snap-research/locomo``. It has no
licence file, so it is never part of this repository: pass the path of the zip (or of the folder or
JSON file it unpacks to). The protocol, so that the figures compare with other systems':

- one space per conversation, one memory per dialog turn with the text
  ``<speaker> (<session date>): <text>`` (the date part of ``session_N_date_time``), plus
  `` [shares a photo: <caption>]`` when the turn has an image, whitespace collapsed;
- the questions of categories 1-4 that have evidence; evidence ids that match no turn are dropped
  (an id field holding several ids separated by ``;`` counts as those ids);
- each question is searched only in its own conversation's space; a hit@k counts when any evidence
  turn is in the top k. Also printed: recall@10 (share of the evidence turns in the top 10), MRR@10
  and session hit@10 (a turn of an evidence session in the top 10).

Tuning happens on the first five conversations (``--split dev``, the default); the other five
(``--split heldout``) are run once, for the published figures. Two ways through the product:

- ``--via store``: memories saved and searched through the store in this process (fast; ``--variant``
  compares search parameters on one load);
- ``--via mcp``: a real ``memory-mcp serve`` process, every turn saved with ``add_memory`` and every
  question asked with ``search_memory`` by MCP clients over HTTP; also counts the tokens of the
  whole tool answer (cl100k, offline ``bpe-openai``), with and without the profile.

Baselines in the same run over the same turns: BM25 (``bm25s``), the model's cosine (the same vectors),
and the two fused by plain reciprocal rank (k = 60); unless ``--no-static``, also the static
embedding's cosine and the plain RRF of all three signals. ``--vectors FILE.npz`` keeps the model's
vectors between runs, so that tuning reruns skip the embedding. Questions are embedded as
``memory-mcp serve`` embeds them (through the model's int8 copy, unless
``MEMORY_MCP_EMBEDDING_INT8_QUERIES=false``); the file keeps both kinds apart.

    python -m bench.locomo PATH [--split dev|heldout|all] [--via store,mcp]
    python -m bench.locomo PATH --via store --variant base: --variant deep:candidates=100
    python -m bench.locomo PATH --via store --vectors dev.npz --variant a: --variant b:static_weight=1.2
    python -m bench.locomo PATH --via store --no-static      # the two-signal product, no static leg
    python -m bench.locomo PATH --via store --by-category --by-conversation
    python -m bench.locomo PATH --via store --documents manual.pdf README   # beside real documents

Needs the ``bench`` extra (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from bench.common import (
    bench_server,
    machine,
    percentile,
    questions_through_int8,
    serve_process,
    server_embedder,
    writer_contexts,
)
from bench.retrieval import parse_params
from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import Embedder
from memory_mcp.embedder.static import StaticModel, load_static_model
from memory_mcp.store import documents as docs
from memory_mcp.store import extractors, intent, memories, pipeline, search
from memory_mcp.store.db import Database
from memory_mcp.store.documents import Contents
from memory_mcp.store.extractors.base import no_progress
from memory_mcp.store.models import SpaceContext

DEV = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43")
CATEGORIES = (1, 2, 3, 4)
K = 10
RRF_K = 60
EMBED_BATCH = 64


# ---------------------------------------------------------------------------------------------
# The data
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    dia_id: str
    session: int
    text: str


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]


@dataclass
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]

    @property
    def space(self) -> str:
        return self.sample_id.lower().replace("_", "-")


def _raw_conversations(path: Path) -> list[dict[str, Any]]:
    """The conversations of a LoCoMo zip, folder or JSON file, each as the dict the data gives."""
    if path.is_file() and path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            names = sorted(n for n in archive.namelist() if n.endswith(".json"))
            items = [(Path(n).stem, json.loads(archive.read(n))) for n in names]
    elif path.is_dir():
        items = [(p.stem, json.loads(p.read_text())) for p in sorted(path.rglob("*.json"))]
    else:
        data = json.loads(path.read_text())
        items = [(str(i), d) for i, d in enumerate(data if isinstance(data, list) else [data])]
    out = []
    for stem, item in items:
        # locomo10.json holds {"sample_id", "conversation": {...}, "qa"}; the zip one file per
        # conversation with the sessions and "qa" at the top level.
        conv = dict(item.get("conversation", item))
        conv["qa"] = item.get("qa", conv.get("qa", []))
        conv["sample_id"] = item.get("sample_id") or f"conv-{stem}"
        out.append(conv)
    return sorted(out, key=lambda c: int(re.sub(r"\D", "", c["sample_id"]) or 0))


def _turn_text(speaker: str, date: str, turn: dict[str, Any]) -> str:
    text = f"{speaker} ({date}): {turn.get('text', '')}"
    if turn.get("blip_caption"):
        text += f" [shares a photo: {turn['blip_caption']}]"
    return " ".join(text.split())


def load_locomo(path: Path) -> list[Conversation]:
    conversations = []
    for raw in _raw_conversations(path):
        turns: list[Turn] = []
        n = 1
        while f"session_{n}_date_time" in raw:
            date = raw[f"session_{n}_date_time"].split(" on ", 1)[-1].strip()
            for turn in raw.get(f"session_{n}") or []:
                turns.append(Turn(turn["dia_id"], n, _turn_text(turn["speaker"], date, turn)))
            n += 1
        known = {t.dia_id for t in turns}
        questions = []
        for qa in raw["qa"]:
            if qa.get("category") not in CATEGORIES or not qa.get("evidence"):
                continue
            ids = {part.strip() for ev in qa["evidence"] for part in str(ev).split(";")} & known
            if ids:
                questions.append(Question(str(qa["question"]), int(qa["category"]), frozenset(ids)))
        conversations.append(Conversation(raw["sample_id"], turns, questions))
    return conversations


# ---------------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------------


@dataclass
class Scores:
    """Per-question outcomes of one system; ``ranked`` holds the dia ids of its top k, in order."""

    name: str
    ranked: list[list[str]] = field(default_factory=list)
    evidence: list[frozenset[str]] = field(default_factory=list)
    sessions: list[dict[str, int]] = field(default_factory=list)
    answer_tokens: list[int] = field(default_factory=list)
    memory_tokens: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    def add(self, ranked: Sequence[str], question: Question, sessions: dict[str, int]) -> None:
        self.ranked.append(list(ranked)[:K])
        self.evidence.append(question.evidence)
        self.sessions.append(sessions)

    def hit(self, k: int) -> float:
        return _mean(any(d in ev for d in r[:k]) for r, ev in zip(self.ranked, self.evidence, strict=True))

    def recall(self) -> float:
        return _mean(len(ev & set(r[:K])) / len(ev) for r, ev in zip(self.ranked, self.evidence, strict=True))

    def mrr(self) -> float:
        def rr(r: list[str], ev: frozenset[str]) -> float:
            return next((1 / (i + 1) for i, d in enumerate(r[:K]) if d in ev), 0.0)

        return _mean(rr(r, ev) for r, ev in zip(self.ranked, self.evidence, strict=True))

    def all_found(self, k: int = K) -> float:
        """Share of questions whose every evidence turn is in the top ``k`` (several-turn questions
        need them all)."""
        return _mean(ev <= set(r[:k]) for r, ev in zip(self.ranked, self.evidence, strict=True))

    def session_hit(self) -> float:
        def one(r: list[str], ev: frozenset[str], sessions: dict[str, int]) -> bool:
            wanted = {sessions[d] for d in ev}
            return any(sessions.get(d) in wanted for d in r[:K])

        return _mean(one(*x) for x in zip(self.ranked, self.evidence, self.sessions, strict=True))

    def row(self) -> str:
        return (
            f"{self.name:<34}{len(self.ranked):>6}{self.hit(1):>8.3f}{self.hit(5):>8.3f}{self.hit(10):>8.3f}"
            f"{self.recall():>8.3f}{self.all_found():>8.3f}{self.mrr():>8.3f}{self.session_hit():>9.3f}"
        )


def _mean(values: Any) -> float:
    items = list(values)
    return sum(items) / len(items) if items else 0.0


HEADER = (
    f"{'system':<34}{'n':>6}{'hit@1':>8}{'hit@5':>8}{'hit@10':>8}{'R@10':>8}{'all@10':>8}{'MRR@10':>8}"
    f"{'sess@10':>9}"
)


def tokenizer() -> Any:
    """cl100k, offline (``bpe-openai`` ships the tables; tiktoken would download them)."""
    import bpe_openai

    return bpe_openai.get_encoding("cl100k_base")


# ---------------------------------------------------------------------------------------------
# Baselines: BM25, cosine of the model's vectors, plain RRF
# ---------------------------------------------------------------------------------------------


def rrf(*rankings: Sequence[int], k: int = RRF_K) -> list[int]:
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank + 1)
    return sorted(scores, key=lambda item: -scores[item])


def baselines(
    conversations: Sequence[Conversation],
    turn_vectors: dict[str, np.ndarray],
    query_vectors: dict[str, np.ndarray],
    model: str,
    static: Vectors | None = None,
) -> list[Scores]:
    """BM25, the model's cosine and their plain RRF; with ``static`` (the static model's turn and
    query vectors), also its cosine and the plain RRF of all three signals."""
    import bm25s

    bm25, dense, fused = Scores("BM25 (bm25s)"), Scores(f"{model} cosine"), Scores("plain RRF (BM25+cosine)")
    static_cos, fused3 = Scores("static cosine"), Scores("plain RRF (BM25+cosine+static)")
    depth = 100
    for conv in conversations:
        ids = [t.dia_id for t in conv.turns]
        sessions = {t.dia_id: t.session for t in conv.turns}
        retriever = bm25s.BM25()
        retriever.index(
            bm25s.tokenize([t.text for t in conv.turns], stopwords="en", show_progress=False),
            show_progress=False,
        )
        matrix = turn_vectors[conv.sample_id]
        for q in conv.questions:
            tokens = bm25s.tokenize([q.text], stopwords="en", show_progress=False)
            n = min(depth, len(ids))
            if tokens.vocab:
                docs, scores = retriever.retrieve(tokens, k=n, show_progress=False)
                lexical = [int(d) for d, s in zip(docs[0], scores[0], strict=True) if s > 0]
            else:
                lexical = []
            semantic = list(np.argsort(-(matrix @ query_vectors[q.text]))[:n])
            bm25.add([ids[i] for i in lexical], q, sessions)
            dense.add([ids[i] for i in semantic], q, sessions)
            fused.add([ids[i] for i in rrf(lexical, semantic)], q, sessions)
            if static is not None:
                third = list(np.argsort(-(static.turns[conv.sample_id] @ static.queries[q.text]))[:n])
                static_cos.add([ids[i] for i in third], q, sessions)
                fused3.add([ids[i] for i in rrf(lexical, semantic, third)], q, sessions)
    return [bm25, dense, fused] + ([static_cos, fused3] if static is not None else [])


async def model_vectors(
    embedder: Embedder, conversations: Sequence[Conversation], cache: Path | None
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The model's vectors of every turn (a matrix per conversation) and question; with ``cache``
    (a .npz file), read from it when it holds them all, written to it otherwise. Tuning reruns
    then skip the embedding, which on a busy 2-core machine is most of a run. Questions embedded
    through the int8 copy are kept apart from exact ones (``query-int8/``), so one file holds both."""
    kind = "query-int8" if questions_through_int8(embedder) else "query"
    cached = _read_vectors(cache, conversations, kind) if cache is not None else None
    if cached is not None:
        print(f"model vectors read from {cache}")
        return cached
    turns = {
        c.sample_id: np.asarray(await embed_passages(embedder, [t.text for t in c.turns]), dtype=np.float32)
        for c in conversations
    }
    queries = {
        q.text: np.asarray(await embedder.embed_query(q.text), dtype=np.float32)
        for c in conversations
        for q in c.questions
    }
    if cache is not None:
        _write_vectors(cache, turns, kind, queries)
    return turns, queries


def _write_vectors(
    cache: Path, turns: dict[str, np.ndarray], kind: str, queries: dict[str, np.ndarray]
) -> None:
    """Write the vectors into ``cache``, keeping what it holds of other questions' kinds."""
    arrays = dict(np.load(cache)) if cache.exists() else {}
    arrays.update({f"turns/{k}": v for k, v in turns.items()})
    arrays.update({f"{kind}/{k}": v for k, v in queries.items()})
    np.savez(cache, **arrays)


def _read_vectors(
    cache: Path, conversations: Sequence[Conversation], kind: str
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None:
    if not cache.exists():
        return None
    stored = np.load(cache)
    turns = {
        c.sample_id: stored[f"turns/{c.sample_id}"] for c in conversations if f"turns/{c.sample_id}" in stored
    }
    questions = [q.text for c in conversations for q in c.questions]
    queries = {q: stored[f"{kind}/{q}"] for q in questions if f"{kind}/{q}" in stored}
    if len(turns) < len(conversations) or len(queries) < len(set(questions)):
        return None
    return turns, queries


@dataclass(frozen=True)
class Vectors:
    """The static model's vectors: each conversation's turns (a matrix) and each question."""

    turns: dict[str, np.ndarray]
    queries: dict[str, np.ndarray]
    model: StaticModel


def static_vectors(conversations: Sequence[Conversation], settings: Settings) -> Vectors:
    """Turns and questions encoded by the static model (distilled into the data dir on first use)."""
    started = time.perf_counter()
    model = load_static_model(settings.static_embedding_cache_dir)
    loaded = time.perf_counter()
    turns = {c.sample_id: model.encode([t.text for t in c.turns]) for c in conversations}
    texts = [q.text for c in conversations for q in c.questions]
    queries = dict(zip(texts, model.encode(texts), strict=True))
    n = sum(len(c.turns) for c in conversations) + len(texts)
    print(
        f"static model ready in {loaded - started:.1f} s; encoded {n} texts in "
        f"{time.perf_counter() - loaded:.2f} s"
    )
    return Vectors(turns, queries, model)


# ---------------------------------------------------------------------------------------------
# Through the store, in process
# ---------------------------------------------------------------------------------------------


async def embed_passages(embedder: Embedder, texts: Sequence[str]) -> list[list[float]]:
    out: list[list[float]] = []
    for start in range(0, len(texts), EMBED_BATCH):
        out.extend(await embedder.embed(list(texts[start : start + EMBED_BATCH])))
    return out


async def documents_of(
    embedder: Embedder, paths: Sequence[Path], static: StaticModel | None = None
) -> list[Contents]:
    """Files as the document pipeline makes them (extracted, chunked, summarised), with vectors
    (and the static model's, as the server gives its uploads, when ``static`` is given)."""
    out = []
    for path in paths:
        with path.open("rb") as file:
            media_type = extractors.detect_type(path.name, file.read(extractors.HEAD_BYTES))
        if media_type is None:
            raise SystemExit(f"{path}: not a type Memory-MCP reads")
        extracted = extractors.extract(
            path, media_type, language=None, progress=no_progress, model_dir=Path(tempfile.gettempdir())
        )
        contents = pipeline.prepare(extracted, file_name=path.name)
        vectors = await embed_passages(embedder, [piece.text for piece in contents.pieces])
        statics = static.vectors([piece.text for piece in contents.pieces]) if static else ()
        out.append(dataclasses.replace(contents, vectors=vectors, static_vectors=statics))
    if out:
        pieces = sum(len(c.pieces) for c in out)
        print(f"documents: {len(out)} files, {pieces} pieces, added to every space for the second pass")
    return out


async def via_store(
    conversations: Sequence[Conversation],
    embedder: Embedder,
    turn_vectors: dict[str, np.ndarray],
    query_vectors: dict[str, np.ndarray],
    settings: Settings,
    variants: Sequence[tuple[str, search.SearchParams]],
    documents: Sequence[Contents] = (),
    static: Vectors | None = None,
) -> list[Scores]:
    """Every turn saved through the store, every question searched; with ``documents``, the
    questions are asked again once those documents are in every conversation's space too."""
    enc = tokenizer()
    passes = [[Scores(f"store: {name}") for name, _ in variants]]
    if documents:
        passes.append([Scores(f"store: {name} + documents") for name, _ in variants])
    save_latencies: list[float] = []
    with bench_server() as server:
        bench_db = server.database("locomo")
        db = Database(bench_db.app_url, pool_size=4)
        try:
            contexts = await writer_contexts(db, [c.space for c in conversations])
            for conv in conversations:
                ctx = contexts[conv.space]
                by_memory: dict[uuid.UUID, str] = {}
                for n, (turn, vector) in enumerate(
                    zip(conv.turns, turn_vectors[conv.sample_id], strict=True)
                ):
                    started = time.perf_counter()
                    saved = await memories.save_memory(
                        db,
                        ctx,
                        turn.text,
                        None,
                        vector.tolist(),
                        supersede_threshold=settings.supersede_threshold,
                        static_embedding=static.turns[conv.sample_id][n].tolist() if static else None,
                    )
                    save_latencies.append(time.perf_counter() - started)
                    by_memory.setdefault(saved.memory.id, turn.dia_id)
                # Statistics, as autovacuum gathers them within a minute of a load: without them the
                # planner reads a whole space where an index step finds a memory's neighbour.
                with psycopg.connect(bench_db.owner_dsn, autocommit=True) as conn:
                    conn.execute("ANALYZE memories")
                for n, pass_scores in enumerate(passes):
                    if n:  # the second pass: the documents join the space first
                        for contents in documents:
                            await docs.save_text(db, ctx, None, contents)
                    for scores, (_, params) in zip(pass_scores, variants, strict=True):
                        await ask(db, ctx, conv, query_vectors, params, by_memory, scores, enc, static)
        finally:
            await db.close()
    print(
        f"store saves: {len(save_latencies)}, p50 {statistics.median(save_latencies) * 1000:.1f} ms, "
        f"p95 {percentile(save_latencies, 95) * 1000:.1f} ms"
    )
    return [scores for pass_scores in passes for scores in pass_scores]


async def ask(
    db: Database,
    ctx: SpaceContext,
    conv: Conversation,
    query_vectors: dict[str, np.ndarray],
    params: search.SearchParams,
    by_memory: dict[uuid.UUID, str],
    scores: Scores,
    enc: Any,
    static: Vectors | None = None,
) -> None:
    """Every question of ``conv`` searched through the store; a hit that is no turn counts as a miss."""
    sessions = {t.dia_id: t.session for t in conv.turns}
    for q in conv.questions:
        started = time.perf_counter()
        found = await search.search_memories(
            db,
            ctx,
            q.text,
            query_embedding=query_vectors[q.text].tolist(),
            limit=K,
            params=params,
            static_embedding=static.queries[q.text].tolist() if static else None,
            word_matches=static.model.soft_matches if static else None,
        )
        scores.latencies.append(time.perf_counter() - started)
        scores.add([by_memory.get(h.memory.id, "document") for h in found.hits], q, sessions)
        scores.memory_tokens.append(sum(len(enc.encode(h.memory.content)) for h in found.hits))


# ---------------------------------------------------------------------------------------------
# End to end over MCP
# ---------------------------------------------------------------------------------------------


def _team_yaml(conversations: Sequence[Conversation]) -> str:
    docs = [
        f"apiVersion: memory-mcp.io/v1alpha1\nkind: Space\nmetadata:\n  name: {c.space}\nspec:\n"
        f"  displayName: LoCoMo {c.sample_id}\n"
        for c in conversations
    ]
    docs.append(
        "apiVersion: memory-mcp.io/v1alpha1\nkind: User\nmetadata:\n  name: bench\nspec:\n"
        "  email: bench@example.com\n  displayName: Bench\n  role: Writer\n"
    )
    grants = "".join(f"    - space: {c.space}\n      access: ReadWrite\n" for c in conversations)
    docs.append(
        "apiVersion: memory-mcp.io/v1alpha1\nkind: ApiKey\nmetadata:\n  name: bench\nspec:\n  user: bench\n"
        f"  grants:\n{grants}  defaultSpace: {conversations[0].space}\n"
        "  secretRef:\n    namespace: default\n    name: bench\n"
    )
    return "---\n".join(docs)


@contextmanager
def running_server(conversations: Sequence[Conversation]) -> Iterator[tuple[str, str]]:
    """A ``memory-mcp serve`` process on a fresh data dir, its spaces and key made by ``apply``:
    yields the base URL and the key; stops the server (and its PostgreSQL) afterwards."""
    import httpx2

    with serve_process("memory-mcp-locomo-") as (server, data_dir, port):
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx2.get(f"{base}/readyz").status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("the server did not become ready")
            time.sleep(0.5)
        team, keys = data_dir / "team.yaml", data_dir / "keys.json"
        team.write_text(_team_yaml(conversations))
        apply = [
            sys.executable,
            "-m",
            "memory_mcp.cli",
            "apply",
            "-f",
            str(team),
            "--data-dir",
            str(data_dir),
        ]
        subprocess.run([*apply, "--keys-out", str(keys)], check=True, stdout=subprocess.DEVNULL)
        yield base, json.loads(keys.read_text())["bench"]


async def via_mcp(conversations: Sequence[Conversation], base: str, key: str, clients: int) -> list[Scores]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    enc = tokenizer()
    plain, with_profile = Scores("mcp: search_memory"), Scores("mcp: with profile (default)")
    by_memory: dict[str, str] = {}
    save_latencies: list[float] = []

    async def session() -> Any:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120)
        return http, Client(streamable_http_client(f"{base}/mcp", http_client=http))

    async def saver(work: list[tuple[str, Turn]]) -> None:
        http, client = await session()
        async with http, client:
            while work:
                space, turn = work.pop()
                started = time.perf_counter()
                result = await client.call_tool("add_memory", {"content": turn.text, "containerTag": space})
                save_latencies.append(time.perf_counter() - started)
                if result.is_error:
                    raise RuntimeError(f"add_memory failed: {result.content}")
                assert result.structured_content is not None
                by_memory.setdefault(_memory_id(result.structured_content), turn.dia_id)

    # In conversation order within a space (the order a chat produces), spaces side by side.
    work = [(c.space, t) for c in conversations for t in reversed(c.turns)]
    started = time.perf_counter()
    await asyncio.gather(*(saver(work) for _ in range(clients)))
    elapsed = time.perf_counter() - started
    print(
        f"mcp saves: {len(save_latencies)} with {clients} clients in {elapsed:.0f} s "
        f"({len(save_latencies) / elapsed:.1f}/s), p50 {statistics.median(save_latencies) * 1000:.0f} ms, "
        f"p95 {percentile(save_latencies, 95) * 1000:.0f} ms"
    )
    http, client = await session()
    async with http, client:
        for conv in conversations:
            sessions = {t.dia_id: t.session for t in conv.turns}
            for q in conv.questions:
                for scores, include in ((plain, False), (with_profile, True)):
                    args = {
                        "query": q.text,
                        "containerTag": conv.space,
                        "limit": K,
                        "includeProfile": include,
                    }
                    started = time.perf_counter()
                    result = await client.call_tool("search_memory", args)
                    scores.latencies.append(time.perf_counter() - started)
                    if result.is_error:
                        raise RuntimeError(f"search_memory failed: {result.content}")
                    assert result.structured_content is not None
                    hits = _hits(result.structured_content)
                    scores.add([by_memory.get(m["id"], "?") for m in hits], q, sessions)
                    text = "".join(c.text for c in result.content if hasattr(c, "text"))
                    scores.answer_tokens.append(len(enc.encode(text)))
                    scores.memory_tokens.append(sum(len(enc.encode(m["content"])) for m in hits))
    return [plain, with_profile]


def _memory_id(structured: dict[str, Any]) -> str:
    memory = structured.get("memory") or {}
    return str(memory["id"])


def _hits(structured: dict[str, Any]) -> list[dict[str, Any]]:
    hits: list[dict[str, Any]] = structured.get("results") or []
    return hits


# ---------------------------------------------------------------------------------------------


def report(all_scores: Sequence[Scores]) -> None:
    print()
    print(HEADER)
    for scores in all_scores:
        print(scores.row())
    for scores in all_scores:
        if scores.latencies:
            lat = scores.latencies
            line = (
                f"  {scores.name}: search p50 {statistics.median(lat) * 1000:.1f} ms, "
                f"p95 {percentile(lat, 95) * 1000:.1f} ms"
            )
            if scores.memory_tokens:
                line += f"; tokens@10 of memory texts mean {statistics.mean(scores.memory_tokens):.0f}"
            if scores.answer_tokens:
                ratio = sum(scores.answer_tokens) / max(1, sum(scores.memory_tokens))
                line += (
                    f", whole answer mean {statistics.mean(scores.answer_tokens):.0f} "
                    f"(x{ratio:.2f} the memory texts), max {max(scores.answer_tokens)}"
                )
            print(line)


def parse_variant(spec: str, settings: Settings) -> tuple[str, search.SearchParams]:
    name, _, pairs = spec.partition(":")
    return name, parse_params([p for p in pairs.split(",") if p], settings)


def select(conversations: list[Conversation], split: str, first: int) -> list[Conversation]:
    if split == "dev":
        conversations = [c for c in conversations if c.sample_id in DEV]
    elif split == "heldout":
        conversations = [c for c in conversations if c.sample_id not in DEV]
    return conversations[:first] if first else conversations


async def run(
    args: argparse.Namespace, conversations: list[Conversation], server: tuple[str, str] | None
) -> None:
    # A busy machine embeds a batch slower than a server waits for one: the bench waits.
    settings = Settings(embedder="local", embedder_timeout_s=600)
    print(f"machine: {machine()}")
    print(
        f"LoCoMo {args.split}: {len(conversations)} conversations "
        f"({', '.join(c.sample_id for c in conversations)}), "
        f"{sum(len(c.turns) for c in conversations)} turns, {sum(len(c.questions) for c in conversations)} questions"
    )
    embedder = await server_embedder(settings)
    try:
        started = time.perf_counter()
        turn_vectors, query_vectors = await model_vectors(embedder, conversations, args.vectors)
        print(f"embedded turns and questions in {time.perf_counter() - started:.0f} s ({embedder.name})")
        static = None if args.no_static else static_vectors(conversations, settings)
        all_scores = baselines(conversations, turn_vectors, query_vectors, embedder.name, static)
        if "store" in args.via.split(","):
            variants = [parse_variant(v, settings) for v in args.variant] or [
                ("default", parse_params([], settings))
            ]
            documents = await documents_of(embedder, args.documents, static.model if static else None)
            all_scores += await via_store(
                conversations, embedder, turn_vectors, query_vectors, settings, variants, documents, static
            )
    finally:
        await embedder.aclose()
    if server is not None:
        all_scores += await via_mcp(conversations, *server, args.clients)
    report(all_scores)
    asked = [(c.sample_id, q) for c in conversations for q in c.questions]
    if args.by_category:
        breakdown(all_scores, "category", [f"category {q.category}" for _, q in asked])
    if args.by_intent:
        breakdown(all_scores, "intent", [f"intent {intent.classify(q.text)}" for _, q in asked])
    if args.by_conversation:
        breakdown(all_scores, "conversation", [sample_id for sample_id, _ in asked])
    if args.questions:
        write_questions(args.questions, asked, all_scores)
        print(f"\nper-question results written to {args.questions}")
    if args.compare:
        paired(args.compare, asked, all_scores)


def _first_hit(ranked: Sequence[str], evidence: frozenset[str]) -> int | None:
    return next((n + 1 for n, d in enumerate(ranked) if d in evidence), None)


def write_questions(path: Path, asked: Sequence[tuple[str, Question]], all_scores: Sequence[Scores]) -> None:
    """One JSON line per question: its category, intent and evidence, and per system the ids of its
    top k and the rank of the first evidence turn among them (null: none)."""
    with path.open("w") as out:
        for n, (sample_id, q) in enumerate(asked):
            systems = {
                s.name: {"ranked": s.ranked[n], "first": _first_hit(s.ranked[n], q.evidence)}
                for s in all_scores
            }
            line = {
                "conversation": sample_id,
                "question": q.text,
                "category": q.category,
                "intent": intent.classify(q.text),
                "evidence": sorted(q.evidence),
                "systems": systems,
            }
            out.write(json.dumps(line) + "\n")


def paired(spec: str, asked: Sequence[tuple[str, Question]], all_scores: Sequence[Scores]) -> None:
    """Each system against the same system's answers in an earlier per-question file (``FILE``), or
    every system against one system of it (``FILE:SYSTEM``): on the same questions, how many only
    the new ranking finds in the top 1 and 10, how many only the old one, and the exact two-sided
    sign (McNemar) test of the difference."""
    path, _, against = spec.partition(":")
    before: dict[tuple[str, str], dict[str, Any]] = {}
    for raw in Path(path).expanduser().read_text().splitlines():
        line = json.loads(raw)
        before[(line["conversation"], line["question"])] = line["systems"]
    print(f"\npaired against {spec} (same questions; new-only / old-only; p: exact sign test)")
    for scores in all_scores:
        name = against or scores.name
        pairs = [
            (_first_hit(scores.ranked[n], q.evidence), before[(sid, q.text)][name]["first"])
            for n, (sid, q) in enumerate(asked)
            if name in before.get((sid, q.text), {})
        ]
        if not pairs:
            continue
        cells = []
        for k in (1, 10):
            new = sum(1 for a, b in pairs if a is not None and a <= k and (b is None or b > k))
            old = sum(1 for a, b in pairs if b is not None and b <= k and (a is None or a > k))
            cells.append(f"hit@{k} +{new} -{old} (p {_sign_test(new, old):.3f})")
        print(f"  {scores.name:<34} n {len(pairs)}: " + "; ".join(cells))


def _sign_test(a: int, b: int) -> float:
    """Two-sided exact binomial test of ``a`` against ``b`` discordant pairs at one half."""
    n = a + b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(a, b) + 1)) / 2**n
    return float(min(1.0, 2 * tail))


def breakdown(all_scores: Sequence[Scores], by: str, groups: Sequence[str]) -> None:
    """Each system's figures per group of questions (``groups``: each question's group, in order)."""
    for scores in all_scores:
        print(f"\n{scores.name} by {by}")
        for group in sorted(set(groups)):
            sub = Scores(f"  {group}")
            for r, ev, s, g in zip(scores.ranked, scores.evidence, scores.sessions, groups, strict=True):
                if g == group:
                    sub.ranked.append(r)
                    sub.evidence.append(ev)
                    sub.sessions.append(s)
            print(sub.row())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", help="locomo10.zip, the folder it unpacks to, or locomo10.json")
    parser.add_argument("--split", choices=("dev", "heldout", "all"), default="dev")
    parser.add_argument("--via", default="store", help="store, mcp or both (comma-separated)")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:K=V,...",
        help="search parameters to compare through the store (SearchParams fields); repeatable",
    )
    parser.add_argument("--clients", type=int, default=16, help="concurrent MCP clients saving the turns")
    parser.add_argument("--conversations", type=int, default=0, help="only the first N of the split")
    parser.add_argument(
        "--vectors",
        type=lambda p: Path(p).expanduser(),
        metavar="FILE.npz",
        help="keep the model's vectors of turns and questions in this file between runs",
    )
    parser.add_argument(
        "--no-static", action="store_true", help="leave the static embedding (the third signal) out"
    )
    parser.add_argument("--by-category", action="store_true")
    parser.add_argument(
        "--by-intent", action="store_true", help="figures per kind of question (store/intent.py)"
    )
    parser.add_argument("--by-conversation", action="store_true")
    parser.add_argument(
        "--questions",
        type=lambda p: Path(p).expanduser(),
        metavar="FILE.jsonl",
        help="write every question's results (per system: its top k, the rank of the first evidence)",
    )
    parser.add_argument(
        "--compare",
        metavar="FILE.jsonl[:SYSTEM]",
        help="a per-question file of an earlier run: paired comparison, system by system of the same name "
        "(or every system against SYSTEM of that run)",
    )
    parser.add_argument(
        "--documents",
        nargs="+",
        type=lambda p: Path(p).expanduser(),
        default=[],
        metavar="FILE",
        help="files (PDF, text, ...) added to every conversation's space for a second pass through the store",
    )
    args = parser.parse_args()
    conversations = select(load_locomo(Path(args.path).expanduser()), args.split, args.conversations)
    if "mcp" in args.via.split(","):
        with running_server(conversations) as server:
            asyncio.run(run(args, conversations, server))
    else:
        asyncio.run(run(args, conversations, None))


if __name__ == "__main__":
    main()
