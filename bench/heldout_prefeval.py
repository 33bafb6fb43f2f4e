"""A second held-out retrieval set: PrefEval's persona conversations, one long history per user.

Nobody tunes the ranking on this set. It is built after the ranking it judges, run once through
``bench.locomo`` and reported once; LoCoMo's dev split and the generated benchmark stay the only
places where search parameters are compared. (The first held-out set, MemoryBank's, has been run
and is spent: ``bench/heldout.py``.)

Source: PrefEval (Zhao et al., 2025, "Do LLMs Recognize Your Preferences? Evaluating Personalized
Preference Following in LLMs"), repository ``amazon-science/PrefEval`` at commit
``50795054b5ff5f418d2b768a331d71e480f93331``, licence CC BY-NC 4.0: the data is read from a
checkout at run time and never committed, and it serves evaluation only. The files are the
persona-driven implicit-preference conversations, ``benchmark_dataset/implicit_preference/
persona-driven/<topic>.json`` (20 topics). Each entry is one conversation (3 to 7 exchanges of a
user with an assistant) in which the user, playing a persona, lets one preference slip into a
message (``"preference"`` says which), and a later ``"question"`` whose good answer depends on that
preference without naming it ("Can you recommend some cafes in San Francisco?" for a user who keeps
a gluten-free diet). The sha256 of the 20 files, hashed in name order, is ``SOURCE_SHA256`` below;
the converter refuses any other version.

What the set asks: given a user's whole history, find the message that holds the preference a
question needs. That is the "what does X like" kind of question, asked the way agents ask it
(through the task, not by naming the trait), over conversations nobody here had read.

The conversion, in the LoCoMo shape that ``bench.locomo.load_locomo`` reads:

- user ``k`` (``pe-k``) is the ``k``-th conversation of every topic, for the ``k`` that every topic
  has (31: the smallest topic has 31 conversations), so each history holds 20 conversations on 20
  topics, in an order rotated by ``k``;
- each conversation is a session, dated one day after the one before from 1 March 2024 at a fixed
  10:00 am (the data has no dates); each exchange is two turns, ``User`` then ``Assistant``;
- a turn longer than one memory may be (``validation.MAX_CONTENT``, less room for the speaker and
  date ``bench.locomo`` puts in front) is cut at the last sentence end before that length (34
  assistant turns of 6,624; a user message never is);
- the question is the entry's ``question``, LoCoMo category 3 (the answer follows from a turn
  that does not state it as the answer);
- its evidence is the user message of that conversation that holds the most of the preference's
  content words (words of three or more letters outside a short stop list), when that message
  holds at least half of them. Where no message does, the persona paraphrased the preference past
  word overlap, and the question is left out rather than labelled by a guess: a retriever's
  judgement (ours or any model's) never picks the evidence.

    python -m bench.heldout_prefeval build PATH/PrefEval -o prefeval.json
    python -m bench.locomo prefeval.json --split all --via store,mcp      # once, for the published figure
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from bench.heldout_cli import build_main
from memory_mcp.store.validation import MAX_CONTENT

SOURCE_SHA256 = "a6e3361c1a61d7e26a8aee1209a644a1b46c814e8b3ba0620ba259b2eacd025d"
PERSONA_DIR = Path("benchmark_dataset/implicit_preference/persona-driven")
TOPICS = 20
FIRST_DAY = date(2024, 3, 1)
SESSION_TIME = "10:00 am"
USER, ASSISTANT = "User", "Assistant"
CATEGORY = 3
# A question is kept when one user message holds at least this share of its preference's words.
MIN_OVERLAP = 0.5

# What a turn may hold: one memory, less the speaker and date in front ("Assistant (30 March, 2024): ").
MAX_TURN = MAX_CONTENT - 64
_SENTENCE_END = re.compile(r"[.!?]\s")

_WORD = re.compile(r"[a-z]{3,}")
_STOP = frozenset(
    [
        "the",
        "and",
        "for",
        "with",
        "that",
        "this",
        "are",
        "was",
        "were",
        "have",
        "has",
        "had",
        "not",
        "but",
        "you",
        "your",
        "from",
        "they",
        "them",
        "their",
        "about",
        "into",
        "over",
        "very",
        "due",
        "also",
        "any",
        "all",
        "can",
        "will",
        "would",
        "should",
        "could",
        "been",
        "being",
        "its",
        "our",
        "who",
        "what",
        "when",
        "where",
        "which",
        "how",
        "some",
        "such",
        "than",
        "then",
        "there",
        "these",
        "those",
        "just",
        "more",
        "most",
        "much",
    ]
)


class HeldoutError(Exception):
    """The source is not the version the set was made from, or not PrefEval's shape."""


@dataclass(frozen=True)
class Built:
    samples: list[dict[str, Any]]
    sessions: int
    turns: int
    questions: int
    left_out: int


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def evidence_turn(preference: str, user_messages: list[str]) -> int | None:
    """Index of the user message that holds the most of ``preference``'s words (the first of
    equals), or None when none holds ``MIN_OVERLAP`` of them."""
    wanted = _words(preference)
    if not wanted:
        return None
    shares = [len(wanted & _words(m)) / len(wanted) for m in user_messages]
    best = max(range(len(shares)), key=lambda i: (shares[i], -i))
    return best if shares[best] >= MIN_OVERLAP else None


def fit(text: str) -> str:
    """``text``, or when it is longer than a memory may be, its longest run of whole sentences that
    fits (else a cut at the last space)."""
    if len(text) <= MAX_TURN:
        return text
    ends = [m.start() + 1 for m in _SENTENCE_END.finditer(text, 0, MAX_TURN)]
    return text[: ends[-1] if ends else text.rfind(" ", 0, MAX_TURN)].rstrip()


def source_sha256(files: list[tuple[str, bytes]]) -> str:
    digest = hashlib.sha256()
    for name, data in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def session_date_time(day: date) -> str:
    return f"{SESSION_TIME} on {day.day} {day:%B}, {day.year}"


def convert(topics: dict[str, list[dict[str, Any]]]) -> Built:
    """The LoCoMo samples: one per user, each holding one conversation of every topic."""
    if len(topics) != TOPICS:
        raise HeldoutError(f"expected {TOPICS} topics, found {len(topics)}")
    names = sorted(topics)
    users = min(len(entries) for entries in topics.values())
    samples, sessions, turns, questions, left_out = [], 0, 0, 0, 0
    for k in range(users):
        conversation: dict[str, Any] = {"speaker_a": USER, "speaker_b": ASSISTANT}
        qa = []
        order = names[k % TOPICS :] + names[: k % TOPICS]
        for n, topic in enumerate(order, start=1):
            entry = topics[topic][k]
            exchanges = [entry["conversation"][i] for i in sorted(entry["conversation"], key=int)]
            session = []
            for exchange in exchanges:
                for speaker, key in ((USER, "user"), (ASSISTANT, "assistant")):
                    session.append(
                        {"speaker": speaker, "dia_id": f"D{n}:{len(session) + 1}", "text": fit(exchange[key])}
                    )
            conversation[f"session_{n}"] = session
            conversation[f"session_{n}_date_time"] = session_date_time(FIRST_DAY + timedelta(days=n - 1))
            turns += len(session)
            at = evidence_turn(entry["preference"], [e["user"] for e in exchanges])
            if at is None:
                left_out += 1
                continue
            qa.append(
                {
                    "question": entry["question"],
                    "answer": entry["preference"],
                    "evidence": [f"D{n}:{2 * at + 1}"],
                    "category": CATEGORY,
                }
            )
        sessions += len(order)
        questions += len(qa)
        samples.append({"sample_id": f"pe-{k}", "conversation": conversation, "qa": qa})
    return Built(samples, sessions, turns, questions, left_out)


def read_source(root: Path) -> list[tuple[str, bytes]]:
    folder = root / PERSONA_DIR
    files = [(p.name, p.read_bytes()) for p in sorted(folder.glob("*.json"))]
    if not files:
        raise HeldoutError(f"no conversations under {folder}: pass the root of a PrefEval checkout")
    return files


def build(root: Path, out: Path, *, any_version: bool = False) -> Built:
    files = read_source(root)
    actual = source_sha256(files)
    if not any_version and actual != SOURCE_SHA256:
        raise HeldoutError(
            f"these files hash to {actual}, not {SOURCE_SHA256} (amazon-science/PrefEval at commit "
            "50795054b5ff5f418d2b768a331d71e480f93331); another version would put the evidence on other turns"
        )
    built = convert({name.removesuffix(".json"): json.loads(data) for name, data in files})
    out.write_text(json.dumps(built.samples, indent=1, ensure_ascii=False) + "\n")
    return built


def main(argv: list[str] | None = None) -> int:
    return build_main(
        argv,
        prog="python -m bench.heldout_prefeval",
        doc=__doc__,
        source="the root of a PrefEval checkout",
        build=build,
        refused=HeldoutError,
        describe=lambda out, built: (
            f"wrote {out}: {len(built.samples)} users, {built.sessions} sessions, {built.turns} turns, "
            f"{built.questions} questions ({built.left_out} left out: no message holds half the preference's words)"
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
