"""A document's title and extractive summary, made without a language model.

The summary is a few of the document's own sentences, in document order. Only prose competes:
text is first cleared of what is not read as sentences (code blocks, Markdown links and badges,
addresses, tables, markup), hard-wrapped lines are joined back into paragraphs, and a sentence
must have enough words, end like a sentence and be mostly words. Each candidate is scored by how
frequent its words are in the whole document (stopwords of English, German and Italian left out),
so sentences about what the document keeps coming back to win, and by how early it comes, since a
document says what it is about near its start.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from .search import STOPWORDS

SUMMARY_SENTENCES = 3
MAX_SUMMARY = 600  # characters; a listing shows every document's summary
MAX_TITLE = 200
# Sentences are scored over at most this much of the content: the summary of a long book need not
# cost a pass over all of it, and what a document is about shows early.
SCORED_CHARS = 200_000
# A summary sentence has this many words at least and at most.
MIN_WORDS, MAX_WORDS = 6, 60
# The k-th prose sentence's score is multiplied by 1 / sqrt(1 + k / LEAD): an early sentence needs
# less to win than one deep in the document.
LEAD = 5

_STOP = frozenset(STOPWORDS)
_WORD = re.compile(r"[^\W\d_]{3,}")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)

# What is not prose, removed before sentences are cut.
_FENCED = re.compile(r"^\s*(```|~~~).*?(^\s*\1|\Z)", re.MULTILINE | re.DOTALL)
# Every repetition is bounded, so that no text (a line of base64, a run of "[" or "<") costs more
# than linear time.
_IMAGE = re.compile(r"!\[[^\[\]\n]{0,500}\]\([^()\[\s]{0,1000}\)")
_LINK = re.compile(r"\[([^\[\]\n]{0,500})\]\([^()\[\s]{0,1000}\)")
_ADDRESS = re.compile(r"(?:https?://|www\.)\S+|<?[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63}){1,8}>?")
_TAG = re.compile(r"</?[A-Za-z][^<>\n]{0,500}>")
_PLAIN = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")  # a word of letters, "don't", "read-only"
_ENDS = re.compile(r"[.!?\u2026\u3002][\"'”’)]*$")
_SYMBOLS = frozenset("{}[]<>=;*_/\\|#@$`~^")
# A line that is a paragraph of its own: a heading, a list item, a table row.
_OWN_LINE = re.compile(r"^(#|[-*+•]\s|\d+[.)]\s|\|)")
_RULE = re.compile(r"^\s*([=~^*#-])\1{2,}\s*$")  # a line under a heading (=====)
# A wrapped paragraph's lines are about as long as its longest; a line much shorter that does not
# end like a sentence is a title, a name or a field ("Version: 1.01"), not part of one.
SHORT_LINE = 0.6
_CONTINUES = tuple(".!?,;-\u2026")
# Sentence ends: terminal punctuation, then space and what can start a sentence.
_SENTENCE_END = re.compile(r"(?<=[.!?\u2026\u3002])[\"'”’)]*\s+(?=[\"'“‘(\[]?[A-ZÀ-ÖØ-Þ0-9])")


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def title_for(content: str, *, given: str | None, heading: str | None, file_name: str | None) -> str:
    """The title a person gave, else the document's first heading, else its file name, else its
    first line."""
    for candidate in (given, heading):
        if candidate and candidate.strip():
            return _shorten(candidate, MAX_TITLE)
    if file_name is None:
        found = _HEADING.search(content[:SCORED_CHARS])
        if found:
            return _shorten(found.group(1), MAX_TITLE)
    if file_name and file_name.strip():
        return _shorten(file_name, MAX_TITLE)
    first = content.strip().splitlines()[0] if content.strip() else "untitled"
    return _shorten(first, 80)


def _paragraphs(text: str) -> list[str]:
    """Prose paragraphs: markup cleared, hard-wrapped lines joined, words split at a line end rejoined."""
    text = _FENCED.sub("\n", text)
    text = _IMAGE.sub(" ", text)
    text = _LINK.sub(r"\1", text)
    text = _ADDRESS.sub(" ", text)
    text = _TAG.sub(" ", text)
    paragraphs: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.splitlines()
        width = max((len(line.strip()) for line in lines), default=0)
        current: list[str] = []
        for line in lines:
            if _RULE.match(line) or line.startswith(("    ", "\t")):
                continue  # a rule under a heading, indented code
            line = line.strip()
            short = len(line) < SHORT_LINE * width and not line.rstrip("\"'”’").endswith(_CONTINUES)
            if _OWN_LINE.match(line) or short:
                paragraphs.extend([" ".join(current), line])
                current = []
            elif current and current[-1].endswith("-") and line[:1].islower():
                current[-1] = current[-1][:-1] + line  # "manip-" + "ulation"
            else:
                current.append(line)
        paragraphs.append(" ".join(current))
    return [" ".join(p.split()) for p in paragraphs if p.strip()]


def _is_prose(sentence: str, starts_paragraph: bool) -> bool:
    tokens = sentence.split()
    if not MIN_WORDS <= len(tokens) <= MAX_WORDS or not _ENDS.search(sentence):
        return False
    first = sentence.lstrip("\"'“‘(*_")[:1]
    # Within a paragraph a sentence starts with a capital; what does not is a fragment or code.
    # A paragraph may start with a name written in lower case ("apt is the package manager").
    if not (first.isupper() or (starts_paragraph and first.isalpha())):
        return False
    words = sum(1 for t in tokens if _PLAIN.fullmatch(t.strip(".,;:!?\"'()“”‘’")))
    symbols = sum(1 for c in sentence if c in _SYMBOLS)
    return words >= 0.6 * len(tokens) and symbols <= 0.03 * len(sentence)


def _sentences(text: str) -> list[tuple[str, bool]]:
    """Every sentence of the prose paragraphs, and whether it starts its paragraph."""
    found: list[tuple[str, bool]] = []
    for paragraph in _paragraphs(text):
        cut = [s.strip() for s in _SENTENCE_END.split(paragraph) if s.strip()]
        found.extend((sentence, i == 0) for i, sentence in enumerate(cut))
    return found


def summarize(content: str, sentences: int = SUMMARY_SENTENCES, limit: int = MAX_SUMMARY) -> str:
    """``sentences`` prose sentences of ``content``, chosen by word frequency and position, in order.

    A text with no prose sentence (a table, a list of names) is summarised by its beginning.
    """
    text = content[:SCORED_CHARS]
    candidates = [s for s, first in _sentences(text) if _is_prose(s, first)]
    if not candidates:
        return _shorten(text, limit)
    freq = Counter(w for w in (w.lower() for w in _WORD.findall(text)) if w not in _STOP)

    def score(index: int) -> float:
        words = [w.lower() for w in _WORD.findall(candidates[index])]
        meaningful = sum(freq[w] for w in words if w not in _STOP)
        # Normalised by the square root of the length: long sentences do not win by length alone.
        return meaningful / math.sqrt(max(len(words), 1)) / math.sqrt(1 + index / LEAD)

    best = sorted(range(len(candidates)), key=score, reverse=True)[:sentences]
    summary = ""
    for index in sorted(best):
        candidate = f"{summary} {candidates[index]}".strip()
        if len(candidate) > limit:
            break
        summary = candidate
    return summary or _shorten(candidates[min(best)], limit)
