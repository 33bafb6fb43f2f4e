"""A fourth held-out retrieval set: RealMem's long-running projects, an assistant recalling what a
user said in earlier sessions when the user comes back to the task.

Nobody tunes the ranking on this set. It is built before the ranking it judges is final, run once
through ``bench.locomo`` at the end and reported once. (MemoryBank's set, ``bench/heldout.py``,
PrefEval's, ``bench/heldout_prefeval.py``, and MADial-Bench's, ``bench/heldout_madial.py``, have
been run and are spent.)

Source: RealMem ("RealMem: Benchmarking LLMs in Real-World Memory-Driven Interaction", arXiv
2601.06966, 2026), repository ``AvatarMemory/RealMemBench`` at commit
``67afd0891d603adcc4458ff0449df306ef296b7a``, licence Apache 2.0 (its ``LICENSE`` file; the README's
badge says MIT); the data is read from a checkout at run time and never committed. The files are
``dataset/<Name>_dialogues_256k.json``, one a persona (10): the persona's sessions with an
assistant over months of projects (learning a subject, planning a trip, managing money...), each
session with its date, its turns and the memory points an extractor drew from it (each naming the
turn it came from, ``source_content_snapshot``). A user turn marked ``is_query`` is one the
assistant answered with earlier memories; the answering turn lists them (``memory_used``, with the
session each came from). The sha256 of each file is ``SOURCE_SHA256`` below; the converter refuses
any other version.

What the set asks: when a user takes a project up again in a later session, find in their whole
history the turns the assistant needs to go on, which the user's message rarely names. The
benchmark's own retrieval score works on sessions; this set labels turns.

The conversion, in the LoCoMo shape that ``bench.locomo.load_locomo`` reads:

- each persona is a sample (``realmem-<name>``); its sessions in date order (the file's order
  among sessions of one date), every session at a fixed 10:00 am (the data has dates only); the
  user's turns are spoken by the persona's name, the others by ``Assistant``; empty turns, and
  sessions left with no turn, are left out; whitespace is collapsed and control characters become
  spaces (the store refuses them);
- a question is a user turn marked ``is_query`` whose next turn is the assistant's with
  ``memory_used``: its text is the user turn's (whitespace collapsed, at most ``MAX_QUERY``),
  LoCoMo category 3 (the memory follows from the message, the message does not ask for it);
- its evidence is, for every memory used, the turn of the memory's session whose text is the
  memory's ``source_content_snapshot`` exactly. A question with a memory that names no single turn
  that way (a schedule item, which has no turn, or a snapshot of a turn later reworded) is left
  out rather than labelled by a guess;
- the query turn and its answer are the question and what it would be answered with, not history:
  both are left out of the space. Where one of them is itself evidence of another question (the
  user says something new while asking), it stays in the space and its own question is left out;
- a turn longer than one memory may be (``validation.MAX_CONTENT``, less room for the speaker and
  date ``bench.locomo`` puts in front) is saved as several memories, whole sentences where they fit,
  that share the turn's dia id: finding any of them finds the turn.

From the published files: 10 personas, 2,045 sessions, 12,508 turns (14,546 memories, 1,082 to
1,841 a persona), 757 questions (54 to 100 a persona; 407 with one evidence turn, 350 with
several); 170 queries left out for a memory that names no single turn, 488 for turns that are
another question's evidence.

    python -m bench.heldout_realmem build PATH/RealMemBench -o realmem.json
    python -m bench.locomo realmem.json --split all --via store,mcp      # once, for the published figure
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from bench.heldout_cli import build_main
from memory_mcp.store.validation import MAX_CONTENT, MAX_QUERY

COMMIT = "67afd0891d603adcc4458ff0449df306ef296b7a"
DATASET = Path("dataset")
SUFFIX = "_dialogues_256k.json"
SOURCE_SHA256 = {
    "Adeleke_Okonjo": "9dc2a8bf2777c182108b3859be6987b4203b65bd6df5cbb6e1a02e4e9f871fdb",
    "Ethan_Hunt": "67bd20d962cd0b01c1531cc82a73a0b1a1e58ef17db6e2f743fc9b35273734ac",
    "Kenta_Tanaka": "b8fe2e606db96dbce1ffa0ab7c21b23ce83d4b5d472d80cd4bd23cd8a259d397",
    "Kim_Ji_young": "e3e286120bc5e42d3dbe513d720f969ecebf3518fbe1a4782595e927474356a9",
    "Liam_O_Connor": "2427ab7d7012b28c0da9b2a70b1763cb60630f5198cf6eeed1ee68d0271c551c",
    "Lin_Wanyu": "a7a751066c48e829b3012a94f2b365febd0e6fb6db454a6d5f4ec01f9c55008a",
    "Oliver_Smith": "25a829eb690d7f81bd47141a0cd7c174e1aa98d899111d8b04e9115f0b92e1f3",
    "Pak_Budi": "d35e08ac141e83780b8b7bc3611feef042dbd082d0986812da1d885d028b638a",
    "Sarah_Miller": "2e84cfb4e29bfceebfb4eed09b84e7a2a7cae8a908d8584830e4c94a29819a6d",
    "Sophie_Dubois": "75f71e5ec0d14606debaea409075a6e631faf6a57d74ce7ec49f17476ef44e26",
}
USER, ASSISTANT = "User", "Assistant"
SESSION_TIME = "10:00 am"
CATEGORY = 3
# What a turn may hold: one memory, less the speaker and date in front ("Assistant (30 March, 2024): ").
MAX_TURN = MAX_CONTENT - 64
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
_DATE = re.compile(r"^(\d{4}-\d{2}-\d{2})\b")

# A turn's place in the file: (index of its session, index of the turn in the session).
Place = tuple[int, int]


class HeldoutError(Exception):
    """The source is not the version the set was made from, or not RealMem's shape."""


@dataclass(frozen=True)
class Built:
    samples: list[dict[str, Any]]
    sessions: int
    turns: int
    memories: int
    questions: int
    unresolved: int
    entangled: int


def _text(value: Any) -> str:
    """``value`` with whitespace collapsed and control characters as spaces (a memory may hold none;
    one turn of the published files has U+0002)."""
    return " ".join(_CONTROL.sub(" ", str(value)).split())


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _key(content: Any) -> str:
    """A memory's content as a key (one in the data is an object, not a string)."""
    return content if isinstance(content, str) else json.dumps(content, sort_keys=True)


def parts(text: str) -> list[str]:
    """``text`` (whitespace collapsed) as pieces of at most ``MAX_TURN`` characters, each cut at
    the last sentence end that fits (at the last space where no sentence ends past half of it)."""
    text = _text(text)
    out = []
    while len(text) > MAX_TURN:
        ends = [m.start() for m in _SENTENCE_END.finditer(text, 0, MAX_TURN + 1)]
        cut = ends[-1] if ends and ends[-1] >= MAX_TURN // 2 else text.rfind(" ", 0, MAX_TURN + 1)
        if cut <= 0:
            cut = MAX_TURN
        out.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    if text:
        out.append(text)
    return out


def session_day(session: dict[str, Any]) -> date:
    found = _DATE.match(str(session.get("current_time", "")))
    if not found:
        raise HeldoutError(f"a session has no date: {session.get('current_time')!r}")
    return date.fromisoformat(found.group(1))


def session_date_time(day: date) -> str:
    return f"{SESSION_TIME} on {day.day} {day:%B}, {day.year}"


@dataclass(frozen=True)
class Question:
    query: Place
    answer: Place
    evidence: frozenset[Place]


def source_turn(sessions: list[dict[str, Any]], memory: dict[str, Any] | None) -> Place | None:
    """The one turn of ``memory``'s session whose text is the memory's snapshot, if exactly one is."""
    if memory is None:
        return None
    snapshot = memory.get("source_content_snapshot")
    where = [n for n, s in enumerate(sessions) if s["session_uuid"] == memory["session_uuid"]]
    if len(where) != 1 or not isinstance(snapshot, str) or not snapshot.strip():
        return None
    turns = sessions[where[0]]["dialogue_turns"]
    matches = [i for i, t in enumerate(turns) if t["content"] == snapshot]
    return (where[0], matches[0]) if len(matches) == 1 else None


def questions(sessions: list[dict[str, Any]]) -> tuple[list[Question], int]:
    """Every query whose used memories each name one turn, and how many queries were left out
    because some memory names none (or several)."""
    memories = {
        (m["session_uuid"], _key(m["content"])): m for s in sessions for m in s.get("extracted_memory") or []
    }
    found, unresolved = [], 0
    for si, session in enumerate(sessions):
        turns = session["dialogue_turns"]
        for ti, turn in enumerate(turns):
            if not turn.get("memory_used") or ti == 0 or not turns[ti - 1].get("is_query"):
                continue
            if turn["speaker"] != ASSISTANT or turns[ti - 1]["speaker"] != USER:
                raise HeldoutError(f"a query in session {session['session_identifier']} is not a user's")
            places = [
                source_turn(sessions, memories.get((used["session_uuid"], _key(used["content"]))))
                for used in turn["memory_used"]
            ]
            evidence = frozenset(p for p in places if p is not None)
            if evidence and None not in places:
                found.append(Question((si, ti - 1), (si, ti), evidence))
            else:
                unresolved += 1
    return found, unresolved


def convert_persona(name: str, data: dict[str, Any]) -> tuple[dict[str, Any], Built]:
    """One persona's sample: its history less the kept questions' own turns, and those questions."""
    sessions = data.get("dialogues")
    if not isinstance(sessions, list) or not sessions:
        raise HeldoutError(f"{name}: no dialogues")
    candidates, unresolved = questions(sessions)
    protected = set().union(*(q.evidence for q in candidates))
    kept = [q for q in candidates if q.query not in protected and q.answer not in protected]
    asked = {place for q in kept for place in (q.query, q.answer)}
    speaker = name.replace("_", " ")
    conversation: dict[str, Any] = {"speaker_a": speaker, "speaker_b": ASSISTANT}
    dia_of: dict[Place, str] = {}
    n = turns = memories = 0
    order = sorted(range(len(sessions)), key=lambda i: session_day(sessions[i]))
    for si in order:
        session: list[dict[str, str]] = []
        k = 0
        for ti, turn in enumerate(sessions[si]["dialogue_turns"]):
            pieces = parts(turn["content"])
            if (si, ti) in asked or not pieces:
                continue
            k += 1
            dia_id = dia_of[(si, ti)] = f"D{n + 1}:{k}"
            who = speaker if turn["speaker"] == USER else ASSISTANT
            session.extend({"speaker": who, "dia_id": dia_id, "text": piece} for piece in pieces)
            turns += 1
            memories += len(pieces)
        if session:
            n += 1
            conversation[f"session_{n}"] = session
            conversation[f"session_{n}_date_time"] = session_date_time(session_day(sessions[si]))
    qa = []
    rank = {si: r for r, si in enumerate(order)}
    for q in sorted(kept, key=lambda q: (rank[q.query[0]], q.query[1])):
        if not all(place in dia_of for place in q.evidence):
            raise HeldoutError(f"{name}: a question's evidence is an empty turn")
        text = _text(sessions[q.query[0]]["dialogue_turns"][q.query[1]]["content"])[:MAX_QUERY]
        evidence = sorted({dia_of[place] for place in q.evidence})
        qa.append({"question": text, "answer": "", "evidence": evidence, "category": CATEGORY})
    sample = {
        "sample_id": f"realmem-{name.lower().replace('_', '-')}",
        "conversation": conversation,
        "qa": qa,
    }
    built = Built([sample], n, turns, memories, len(qa), unresolved, len(candidates) - len(kept))
    return sample, built


def build(root: Path, out: Path, *, any_version: bool = False) -> Built:
    folder = root / DATASET
    files = sorted(folder.glob(f"*{SUFFIX}"))
    if not files:
        raise HeldoutError(f"{folder} holds no *{SUFFIX}: pass the root of a RealMemBench checkout")
    data = {f.name.removesuffix(SUFFIX): f.read_bytes() for f in files}
    if not any_version:
        if set(data) != set(SOURCE_SHA256):
            raise HeldoutError(
                f"{folder} holds personas {sorted(data)}, not the 10 of AvatarMemory/RealMemBench at commit {COMMIT}"
            )
        for name, raw in data.items():
            actual = hashlib.sha256(raw).hexdigest()
            if actual != SOURCE_SHA256[name]:
                raise HeldoutError(
                    f"{name}{SUFFIX} hashes to {actual}, not {SOURCE_SHA256[name]} "
                    f"(AvatarMemory/RealMemBench at commit {COMMIT})"
                )
    samples, totals = [], [0] * 6
    for name, raw in data.items():
        sample, built = convert_persona(name, json.loads(raw))
        samples.append(sample)
        counts = (
            built.sessions,
            built.turns,
            built.memories,
            built.questions,
            built.unresolved,
            built.entangled,
        )
        totals = [a + b for a, b in zip(totals, counts, strict=True)]
    out.write_text(json.dumps(samples, indent=1, ensure_ascii=False) + "\n")
    return Built(samples, *totals)


def main(argv: list[str] | None = None) -> int:
    return build_main(
        argv,
        prog="python -m bench.heldout_realmem",
        doc=__doc__,
        source="the root of a RealMemBench checkout",
        build=build,
        refused=HeldoutError,
        describe=lambda out, built: (
            f"wrote {out}: {len(built.samples)} personas, {built.sessions} sessions, {built.turns} turns "
            f"({built.memories} memories), {built.questions} questions ({built.unresolved} left out: a "
            f"memory used names no single turn; {built.entangled} left out: their turns are another's evidence)"
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
