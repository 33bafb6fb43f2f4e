"""What a search answer carries: the floor, the budget, passages, and the token estimate."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import bpe_openai

from memory_mcp.store import lean
from memory_mcp.store.models import Memory
from memory_mcp.store.search import SearchHit
from tests import samples

ENGLISH = [
    "Our Kubernetes clusters run in eu-central-1, and the staging cluster is in eu-west-1.",
    "Caroline went to the LGBTQ support group on 7 May 2023 and said it was powerful.",
    "The ledger worker keeps its state in the table called ledger_entries; restart it when invoices fail.",
    "Melanie painted a sunrise over the lake last year, after the camping trip with her kids.",
    *samples.PDF_PAGES,
    samples.SPEECH_TEXT,
]


def test_the_token_estimate_follows_cl100k() -> None:
    enc = bpe_openai.get_encoding("cl100k_base")
    estimated = sum(lean.estimate_tokens(t) for t in ENGLISH)
    counted = sum(len(enc.encode(t)) for t in ENGLISH)
    # Four characters a token: 0.99 of cl100k over all 5,882 LoCoMo turns, 1.19 over these (plain
    # English packs more characters into a token than chat does). Over, not under: a budget holds.
    assert 0.9 <= estimated / counted <= 1.3, (estimated, counted)


def _hit(score: float, matching: bool = True) -> SearchHit:
    now = datetime.now(UTC)
    memory = Memory(
        id=uuid.uuid4(),
        space_key="s",
        document_id=uuid.uuid4(),
        content="x",
        category=None,
        version=1,
        supersedes_id=None,
        is_latest=True,
        forgotten_at=None,
        created_at=now,
        updated_at=now,
        created_by_user_id=None,
        created_by=None,
        updated_by_user_id=None,
        updated_by=None,
        has_embedding=True,
    )
    return SearchHit(memory=memory, score=score, modes=("semantic",), similarity=score, matching=matching)


def test_the_absolute_floor_gates_the_answer_and_the_relative_one_trims_it() -> None:
    hits = [_hit(0.9), _hit(0.5), _hit(0.34), _hit(0.4, matching=False), _hit(0.3, matching=False)]
    # Something clears the absolute floor: every hit within 0.4 of the best is shown, under the
    # absolute floor or not (a conversation's turn that answers a question it shares little with).
    assert [h.score for h in lean.relevant(hits, has_query=True)] == [0.9, 0.5, 0.4]  # 0.34 < 0.4 x 0.9
    # A keyword or category match is what was asked for: the hits that clear the absolute floor.
    assert [h.score for h in lean.relevant(hits, has_query=False)] == [0.9, 0.5, 0.34]
    # Nothing clears it: nothing is shown, however close the hits are to each other.
    assert lean.relevant([_hit(0.2, matching=False), _hit(0.19, matching=False)], has_query=True) == []


def test_the_budget_keeps_at_least_one() -> None:
    assert lean.within_budget([100, 100, 100], 250) == 2
    assert lean.within_budget([900, 10], 100) == 1
    assert lean.within_budget([], 100) == 0


def test_a_long_piece_is_shown_by_its_matching_passage() -> None:
    filler = " ".join(f"Sentence {n} is about the weather in spring." for n in range(30))
    piece = f"{filler} The backup job writes to bucket nightly-archive at 02:00. {filler}"
    found = lean.passage(piece, "Where does the backup job write?")
    assert found is not None and "nightly-archive" in found.text
    assert (
        found.text.startswith("…") and found.text.endswith("…") and len(found.text) <= lean.PASSAGE_CHARS + 2
    )
    assert piece[found.start : found.end].strip() in piece
    keyword = lean.passage(piece, None, keyword="nightly-arch")
    assert keyword is not None and "nightly-archive" in keyword.text
    assert lean.passage("Short enough to show whole.", "whole") is None
    one_long_sentence = "word " * 300 + "needle " + "word " * 300
    cut = lean.passage(one_long_sentence, "needle")
    assert cut is not None and "needle" in cut.text and len(cut.text) <= lean.PASSAGE_CHARS + 2
