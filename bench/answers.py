"""How lean search answers are beside real documents: characters and cl100k tokens per answer.

Files go into one space through the document pipeline (extraction, running headers left out,
pieces, vectors); then questions the files cannot answer and questions they can are asked through
the service, and each answer is rendered as the MCP tool renders it. Prints, per kind of question,
the answer's characters and tokens, the results shown and how many more matched, and the tokens of
the memory text the answer carries; and for each file how many pieces begin with the same line.

With ``--locomo PATH``, LoCoMo dev conversations (``--conversations N``: the first N) are saved
turn by turn first and their questions asked through the service too: hit@1/5/10 of what the
answers show against the store's own top 10, and the answer's tokens against the memory text it
carries (``includeProfile`` false, as over MCP in bench/locomo.py), and where the tokens beyond
the memory text go: the lead line, the short ids, the other marks of each line, the trailer.

    python -m bench.answers FILE...
    python -m bench.answers /usr/share/doc/libtasn1-doc/libtasn1.pdf /usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf
    python -m bench.answers --locomo locomo10.zip --conversations 2 FILE...
    python -m bench.answers --locomo locomo10.zip --generated 7     # the three sets of Recall v4
    python -m bench.answers --generated 7 --days 90      # a space filled over three months
    python -m bench.answers --locomo heldout.json --split all
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import text as sql

from bench.common import bench_server, machine, writer_contexts
from bench.locomo import Conversation, K, Scores, documents_of, embed_passages, load_locomo, select, tokenizer
from bench.retrieval_dataset import Dataset, build_dataset
from memory_mcp.core.settings import Settings
from memory_mcp.embedder.client import make_embedder
from memory_mcp.embedder.static import static_model_for
from memory_mcp.server import render
from memory_mcp.server.service import MemoryService
from memory_mcp.store import documents, memories, search
from memory_mcp.store import lean as lean_rules
from memory_mcp.store.db import Database
from memory_mcp.store.models import SpaceContext


class Spent:
    """Where an answer's tokens go, summed over answers: the lead line, each line's short id, the
    rest of each line's marks (quotation mark, category, byline, newline), the memory texts, and
    what follows the lines (how many more matched). cl100k tokens, each part counted on its own."""

    def __init__(self, enc: Any) -> None:
        self.enc = enc
        self.parts: Counter[str] = Counter()
        self.answers = 0

    def add(self, out: Any, text: str) -> None:
        count = len(self.enc.encode(text))
        lead = text.split("\n", 1)[0]
        memory = sum(len(self.enc.encode(h.content)) for h in out.results)
        ids = sum(len(self.enc.encode(h.shortId or h.id[:8])) for h in out.results)
        trailer = len(self.enc.encode(text.split("\n")[-1])) if out.matching > out.count else 0
        self.parts.update(
            lead=len(self.enc.encode(lead)),
            ids=ids,
            marks=count - len(self.enc.encode(lead)) - ids - memory - trailer,
            memory=memory,
            trailer=trailer,
        )
        self.answers += 1

    def line(self) -> str:
        n = max(1, self.answers)
        memory = max(1, self.parts["memory"])
        parts = ", ".join(
            f"{name} {self.parts[name] / n:.1f} (x{self.parts[name] / memory:.3f})"
            for name in ("lead", "ids", "marks", "trailer")
        )
        return f"tokens an answer spends beyond its memory text ({self.parts['memory'] / n:.1f}): {parts}"


# Nothing in a manual of ASN.1 or of MIME types answers these.
NO_MATCH = [
    "What did Caroline paint last summer?",
    "When is the team offsite in Lisbon?",
    "quantum chromodynamics lattice gauge theory",
    "Which restaurant did we book for the birthday dinner?",
    "How many goals did the striker score in the final?",
    "What is the recipe for grandmother's apple cake?",
    "Who won the chess tournament in Oslo?",
    "When does the swimming pool open on Sundays?",
]
# And these they do.
MATCH = [
    "How do I decode a DER encoded structure?",
    "What does asn1_create_element return?",
    "Where are the MIME type definitions installed?",
    "How is a glob pattern given a weight?",
    "Which utility parses an ASN.1 definitions file?",
    "What does the magic element match?",
]


async def locomo(
    service: MemoryService,
    db: Database,
    conversations: list[Conversation],
    contexts: dict[str, SpaceContext],
    enc: Any,
) -> None:
    """LoCoMo questions through the service: what lean answers cost in hit@k, and their tokens."""
    store, lean = Scores("store top 10"), Scores("lean answers (service)")
    floors = {f: Scores(f"floor: relative {f}") for f in (0.3, 0.5, 0.6)}  # the store's top 10, floored
    shown: list[int] = []
    spent = Spent(enc)
    for conv in conversations:
        ctx = contexts[conv.space]
        vectors = await embed_passages(service.embedder, [t.text for t in conv.turns])  # type: ignore[arg-type]
        by_memory: dict[uuid.UUID, str] = {}
        for turn, vector in zip(conv.turns, vectors, strict=True):
            saved = await memories.save_memory(
                db,
                ctx,
                turn.text,
                None,
                vector,
                supersede_threshold=service.settings.supersede_threshold,
                static_embedding=service.static.vectors([turn.text])[0] if service.static else None,
            )
            by_memory.setdefault(saved.memory.id, turn.dia_id)
        by_id = {str(k): v for k, v in by_memory.items()}
        sessions = {t.dia_id: t.session for t in conv.turns}
        for q in conv.questions:
            vector = await service.embedder.embed_query(q.text)  # type: ignore[union-attr]
            ranked = await search.search_memories(
                db,
                ctx,
                q.text,
                query_embedding=vector,
                limit=K,
                static_embedding=service.static.vectors([q.text])[0] if service.static else None,
                word_matches=service.static.soft_matches if service.static else None,
            )
            store.add([by_memory.get(h.memory.id, "?") for h in ranked.hits], q, sessions)
            for floor, scores in floors.items():
                kept = lean_rules.relevant(ranked.hits, has_query=True, relative_floor=floor)
                scores.add([by_memory.get(h.memory.id, "?") for h in kept], q, sessions)
            out = await service.search(
                ctx.caller, query=q.text, include_profile=False, container_tag=conv.space, limit=K
            )
            lean.add([by_id.get(h.id, "?") for h in out.results], q, sessions)
            text = render.search(out)
            lean.answer_tokens.append(len(enc.encode(text)))
            lean.memory_tokens.append(sum(len(enc.encode(h.content)) for h in out.results))
            shown.append(out.count)
            if out.results:
                spent.add(out, text)
    print(f"{', '.join(c.sample_id for c in conversations)}: {len(store.ranked)} questions")
    for scores in (store, lean, *floors.values()):
        print(
            f"  {scores.name:<24} hit@1 {scores.hit(1):.3f} hit@5 {scores.hit(5):.3f} hit@10 {scores.hit(10):.3f}"
        )
    ratio = sum(lean.answer_tokens) / max(1, sum(lean.memory_tokens))
    print(
        f"  answers: {statistics.mean(shown):.1f} results shown on average; tokens mean "
        f"{statistics.mean(lean.answer_tokens):.0f}, max {max(lean.answer_tokens)}; memory text mean "
        f"{statistics.mean(lean.memory_tokens):.0f} (answer x{ratio:.2f} of it)"
    )
    print(f"  {spent.line()}")


async def generated(
    service: MemoryService,
    db: Database,
    data: Dataset,
    contexts: dict[str, SpaceContext],
    enc: Any,
    days: int = 0,
) -> None:
    """The generated team benchmark (bench/retrieval_dataset.py) through the service: every memory
    saved in its space, every query with a question asked; the answer's tokens against the memory
    text it carries (``includeProfile`` false). With ``days``, each memory is dated a day of the
    last ``days`` (seeded), as in a space filled over weeks: the lines of an answer then differ in
    their day, which the text says line by line; otherwise every memory is saved today."""
    vectors = await embed_passages(service.embedder, [m.content for m in data.memories])  # type: ignore[arg-type]
    dated = random.Random(days)
    for memory, vector in zip(data.memories, vectors, strict=True):
        static = service.static.vectors([memory.content])[0] if service.static else None
        ctx = contexts[memory.space]
        saved = await memories.save_memory(
            db, ctx, memory.content, memory.category, vector, static_embedding=static
        )
        if days:
            async with db.transaction([ctx.space.id]) as conn:
                await conn.execute(
                    sql(
                        "UPDATE memories SET created_at = created_at - make_interval(days => :d) WHERE id = :id"
                    ),
                    {"d": dated.randrange(days), "id": saved.memory.id},
                )
    answer, carried, shown = [], [], []
    spent = Spent(enc)
    for query in data.queries:
        if query.text is None:
            continue
        out = await service.search(
            contexts[query.space].caller,
            query=query.text,
            keyword=query.keyword,
            category=query.category,
            include_profile=False,
            container_tag=query.space,
            limit=K,
        )
        if out.results:
            text = render.search(out)
            answer.append(len(enc.encode(text)))
            carried.append(sum(len(enc.encode(h.content)) for h in out.results))
            shown.append(out.count)
            spent.add(out, text)
    print(
        f"generated: {len(answer)} answers with results, {statistics.mean(shown):.1f} shown on "
        f"average; tokens mean {statistics.mean(answer):.0f}, memory text mean {statistics.mean(carried):.0f} "
        f"(answer x{sum(answer) / max(1, sum(carried)):.2f} of it)"
    )
    print(f"  {spent.line()}")


async def run(
    paths: list[Path],
    locomo_path: Path | None = None,
    first: int = 0,
    split: str = "dev",
    seed: int | None = None,
    days: int = 0,
) -> None:
    settings = Settings(embedder="local", embedder_timeout_s=600)  # a busy machine embeds slowly
    print(f"machine: {machine()}")
    enc = tokenizer()
    embedder = await make_embedder(settings)
    # The static model as a running server has it: the third signal and the soft word match.
    static = await static_model_for(settings)
    contents = await documents_of(embedder, paths, static)
    for path, c in zip(paths, contents, strict=True):
        firsts = Counter(p.text.split("\n", 1)[0] for p in c.pieces)
        line, count = firsts.most_common(1)[0]
        print(
            f"{path.name}: {len(c.pieces)} pieces; the most common first line begins {count} ({line[:50]!r})"
        )
    with bench_server() as server:
        db = Database(server.database("answers").app_url, pool_size=2)
        try:
            service = MemoryService(db, embedder, settings)
            service.static = static
            conversations = select(load_locomo(locomo_path), split, first) if locomo_path else []
            data = build_dataset(seed) if seed is not None else None
            contexts = await writer_contexts(
                db, ["uploads", *(c.space for c in conversations), *(data.spaces if data else ())]
            )
            if conversations:
                await locomo(service, db, conversations, contexts, enc)
            if data is not None:
                await generated(service, db, data, contexts, enc, days)
            ctx = contexts["uploads"]
            for c in contents:
                await documents.save_text(db, ctx, None, c)
            for kind, questions in (("no match", NO_MATCH), ("match", MATCH)):
                chars, tokens, shown, more, carried = [], [], [], [], []
                for question in questions:
                    out = await service.search(ctx.caller, query=question, container_tag="uploads")
                    text = render.search(out)
                    chars.append(len(text))
                    tokens.append(len(enc.encode(text)))
                    shown.append(out.count)
                    more.append(out.matching - out.count)
                    carried.append(sum(len(enc.encode(h.content)) for h in out.results))
                ratio = sum(tokens) / max(1, sum(carried))
                print(
                    f"{kind}: {len(questions)} questions; answer characters mean {statistics.mean(chars):.0f} "
                    f"max {max(chars)}; tokens mean {statistics.mean(tokens):.0f} max {max(tokens)}; "
                    f"results shown mean {statistics.mean(shown):.1f}, more not shown {sum(more)}; "
                    f"memory text carried {sum(carried)} tokens (answer x{ratio:.2f} of it)"
                )
        finally:
            await db.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument(
        "--locomo", type=Path, help="locomo10.zip (or a file in its format): also ask its questions"
    )
    parser.add_argument("--split", choices=("dev", "heldout", "all"), default="dev", help="of --locomo")
    parser.add_argument("--conversations", type=int, default=0, help="only the first N conversations")
    parser.add_argument("--generated", type=int, metavar="SEED", help="also the generated team benchmark")
    parser.add_argument(
        "--days", type=int, default=0, help="the generated benchmark's memories dated over the last N days"
    )
    args = parser.parse_args()
    asyncio.run(run(args.files, args.locomo, args.conversations, args.split, args.generated, args.days))


if __name__ == "__main__":
    main()
