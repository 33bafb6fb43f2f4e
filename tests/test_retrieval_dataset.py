"""The retrieval benchmark dataset: deterministic, consistent, and hard enough to measure something."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from bench.retrieval_dataset import LANGUAGES, QUERY_KINDS, Dataset, build_dataset
from memory_mcp.store.secrets import find_secret

ROOT = Path(__file__).resolve().parents[1]
DIGEST_SCRIPT = (
    "import hashlib; from bench.retrieval_dataset import build_dataset; "
    "print(hashlib.sha256(repr(build_dataset()).encode()).hexdigest())"
)


@pytest.fixture(scope="module")
def data() -> Dataset:
    return build_dataset()


def _current(data: Dataset, space: str) -> list[str]:
    superseded = {m.supersedes for m in data.memories if m.supersedes}
    return [m.key for m in data.memories if m.space == space and m.key not in superseded]


def test_same_seed_same_dataset(data: Dataset) -> None:
    assert build_dataset() == data
    assert build_dataset(seed=8) != data


def test_same_dataset_in_another_process_with_another_hash_seed(data: Dataset) -> None:
    expected = hashlib.sha256(repr(data).encode()).hexdigest()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", DIGEST_SCRIPT],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == expected


def test_counts(data: Dataset) -> None:
    assert len(data.memories) == 1500
    assert len(data.queries) == 300
    assert data.spaces == ["payments", "platform", "logistik", "design", "research"]


def test_scale_adds_spaces_and_keeps_the_first_ones() -> None:
    small, large = build_dataset(scale=1), build_dataset(scale=2)
    assert len(large.memories) == 2 * len(small.memories)
    assert len(large.queries) == 2 * len(small.queries)
    assert large.memories[: len(small.memories)] == small.memories
    assert "payments-2" in large.spaces
    with pytest.raises(ValueError):
        build_dataset(scale=0)


def test_keys_and_contents_are_unique(data: Dataset) -> None:
    assert len({m.key for m in data.memories}) == len(data.memories)
    assert len({q.key for q in data.queries}) == len(data.queries)
    for space in data.spaces:
        contents = [m.content for m in data.memories if m.space == space]
        assert len(set(contents)) == len(contents)


def test_every_answer_exists_in_the_query_space(data: Dataset) -> None:
    for query in data.queries:
        assert query.text or query.keyword, query
        assert query.expected, query
        for key in (*query.expected, *query.stale):
            assert data.by_key[key].space == query.space, (query.key, key)
        assert not set(query.expected) & set(query.stale)


def test_every_kind_and_language_is_present(data: Dataset) -> None:
    assert set(Counter(q.kind for q in data.queries)) == set(QUERY_KINDS)
    assert {m.language for m in data.memories} == set(LANGUAGES)
    assert {q.language for q in data.queries} == set(LANGUAGES)
    cross = [q for q in data.queries if q.text and data.by_key[q.expected[0]].language != q.language]
    assert len(cross) >= 20


def test_category_queries_expect_memories_of_that_category(data: Dataset) -> None:
    queries = [q for q in data.queries if q.category is not None]
    assert len(queries) >= 30
    for query in queries:
        assert query.text
        for key in query.expected:
            assert data.by_key[key].category == query.category
        # A memory on the same subject in another category is what the filter has to keep out.
        others = [m for m in data.memories if m.space == query.space and m.category != query.category]
        assert others


def test_keyword_is_in_every_expected_memory_and_expected_is_complete(data: Dataset) -> None:
    queries = [q for q in data.queries if q.keyword is not None]
    assert {q.kind for q in queries} == {"code", "partial_word"}
    for query in queries:
        needle = query.keyword.casefold() if query.keyword else ""
        for key in query.expected:
            assert needle in data.by_key[key].content.casefold(), (query.keyword, key)
        containing = {k for k in _current(data, query.space) if needle in data.by_key[k].content.casefold()}
        assert containing == set(query.expected)
        assert len(query.expected) <= 3


def test_partial_words_are_fragments_not_whole_words(data: Dataset) -> None:
    for query in (q for q in data.queries if q.kind == "partial_word"):
        for key in query.expected:
            words = re.findall(r"\w+", data.by_key[key].content.casefold())
            assert query.keyword and query.keyword.casefold() not in words


def test_corrections_are_newer_and_supersede_the_stale_memory(data: Dataset) -> None:
    queries = [q for q in data.queries if q.kind == "correction"]
    assert len(queries) >= 30
    for query in queries:
        assert len(query.expected) == 1 and len(query.stale) == 1
        fresh, stale = data.by_key[query.expected[0]], data.by_key[query.stale[0]]
        assert fresh.supersedes == stale.key
        assert fresh.created_offset_days < stale.created_offset_days
    for memory in data.memories:
        if memory.supersedes:
            assert data.by_key[memory.supersedes].space == memory.space


def test_exact_queries_quote_their_memory(data: Dataset) -> None:
    for query in (q for q in data.queries if q.kind == "exact"):
        assert query.text and query.text in data.by_key[query.expected[0]].content


def test_memories_can_be_saved(data: Dataset) -> None:
    """The harness saves through the store, which refuses long content and anything like a credential."""
    for memory in data.memories:
        assert 0 < len(memory.content) <= 2000
        assert memory.created_offset_days >= 0
        assert find_secret(memory.content) is None, memory.content


_STOPWORD_TEXT = (
    "the a an of to in on for and or is are be we our i my me you your it its at by with from as do does did can "
    "should what who when where which how why this that there here any after before about into than then them "
    "they their has have had will would not"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text.casefold()) if len(w) > 2 and w not in _STOPWORDS}


def test_paraphrases_are_not_solved_by_word_overlap(data: Dataset) -> None:
    """Ranking a space by shared content words finds the answer first for very few paraphrases."""
    queries = [q for q in data.queries if q.kind == "paraphrase"]
    top_hits = 0
    shares = []
    for query in queries:
        assert query.text
        words = _content_words(query.text)
        space = _current(data, query.space)
        best = max(space, key=lambda k: (len(words & _content_words(data.by_key[k].content)), k))
        top_hits += best in query.expected
        answer = _content_words(data.by_key[query.expected[0]].content)
        shares.append(len(words & answer) / len(words))
    assert top_hits / len(queries) < 0.2
    assert sum(shares) / len(shares) < 0.2
