"""A third held-out retrieval set: MADial-Bench's memory recall, an agent finding the memory a
conversation calls for.

Nobody tunes the ranking on this set. It is built after the ranking it judges, run once through
``bench.locomo`` and reported once. (MemoryBank's set, ``bench/heldout.py``, and PrefEval's,
``bench/heldout_prefeval.py``, have been run and are spent.)

Source: MADial-Bench (He et al., NAACL 2025, "MADial-Bench: Towards Real-world Evaluation of
Memory-Augmented Dialogue Generation"), repository ``hejunqing/MADial-Bench`` at commit
``572e3a10d6d01852a65e4508e0b3ab2a00d0710c``, MIT licence; the data is read from a checkout at run
time. The English files: ``data/en/MADial-Bench-en-memory.json`` (160 memories, one JSON object a
line: an id, its date, scene, emotion and event) and ``data/en/MADial-Bench-en-dialogue.json`` (160
dialogues of a user with an assistant, each with ``test-turn``, the assistant turns that should
bring a memory up, and ``relevant-id``, the memories that fit there, as the benchmark's annotators
labelled them). The sha256 of each file is below; the converter refuses any other version.

What the set asks: mid-conversation, find in a user's memories the ones the conversation calls for
("I'm going to perform a magic trick at the New Year's Eve party!" calls up the Christmas party
where they danced). That is how an agent recalls, with the conversation so far as its cue, and
the relevant memory rarely shares its words.

The conversion, in the LoCoMo shape that ``bench.locomo.load_locomo`` reads:

- each user is a sample (two: the benchmark's user ids 1 and 2, Bart and Lisa); a memory belongs to
  the user its event names (every event names exactly one of them);
- memories are turns spoken by that user, in sessions of one date each, dated by the memory's date
  at a fixed 10:00 am, in date order; a turn's text is the event;
- a question is the dialogue before its first test turn, as the benchmark's own recall task cues
  it (``''.join(dialogue[:test_turn])``), one ``Speaker: text`` line per turn, the
  begin-of-dialogue mark left out; LoCoMo category 3 (the memory follows from the conversation, it
  is not named there);
- its evidence is every relevant id's memory.

    python -m bench.heldout_madial build PATH/MADial-Bench -o madial.json
    python -m bench.locomo madial.json --split all --via store,mcp      # once, for the published figure
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from bench.heldout_cli import build_main
from memory_mcp.store.validation import MAX_QUERY

MEMORY_FILE = Path("data/en/MADial-Bench-en-memory.json")
DIALOGUE_FILE = Path("data/en/MADial-Bench-en-dialogue.json")
SOURCE_SHA256 = {
    MEMORY_FILE: "d384b2d35e01ed364165001911af7f8193c808d168b106dea7b23435c7717aa5",
    DIALOGUE_FILE: "ba987172b4a720dd108c9a3b04855b8489ecde96fdf5d484d6522602ec6f4a31",
}
USERS = {1: "Bart", 2: "Lisa"}
ASSISTANT = "Assistant"
SESSION_TIME = "10:00 am"
CATEGORY = 3
BEGIN = "<BOD>"
# A dialogue turn: ``<Speaker>: "text"`` (a few turns lack the speaker mark; they are kept as text).
_TURN = re.compile(r"^<([^<>]+)>:\s*(.*)$", re.DOTALL)


class HeldoutError(Exception):
    """The source is not the version the set was made from, or not MADial-Bench's shape."""


@dataclass(frozen=True)
class Built:
    samples: list[dict[str, Any]]
    memories: int
    questions: int


def _lines(data: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def owner(event: str) -> int:
    """The user id whose name the event holds; exactly one must."""
    named = [uid for uid, name in USERS.items() if re.search(rf"\b{name}\b", event)]
    if len(named) != 1:
        raise HeldoutError(f"a memory names {len(named)} of the users, not one: {event[:80]!r}")
    return named[0]


def cue(dialogue: list[str], test_turn: int) -> str:
    """The conversation before ``test_turn``: ``Speaker: text`` lines, quotes and marks dropped."""
    lines = []
    for raw in dialogue[:test_turn]:
        raw = raw.strip()
        if not raw or raw == BEGIN:
            continue
        turn = _TURN.match(raw)
        speaker, text = (turn.group(1), turn.group(2)) if turn else (None, raw)
        text = text.strip().strip('"').strip()
        lines.append(f"{speaker}: {text}" if speaker else text)
    return "\n".join(lines)[:MAX_QUERY]


def session_date_time(day: date) -> str:
    return f"{SESSION_TIME} on {day.day} {day:%B}, {day.year}"


def convert(memory_lines: list[dict[str, Any]], dialogues: list[dict[str, Any]]) -> Built:
    """The LoCoMo samples: one per user, its memories as turns, its dialogues as questions."""
    memories: dict[int, dict[str, Any]] = {}
    for line in memory_lines:
        for key, memory in line.items():
            memories[int(key)] = memory
    by_user: dict[int, dict[date, list[int]]] = defaultdict(lambda: defaultdict(list))
    for mid in sorted(memories):
        by_user[owner(memories[mid]["event"])][date.fromisoformat(memories[mid]["time"])].append(mid)
    samples, questions = [], 0
    for uid, name in USERS.items():
        conversation: dict[str, Any] = {"speaker_a": name, "speaker_b": ASSISTANT}
        dia_of: dict[int, str] = {}
        for n, day in enumerate(sorted(by_user[uid]), start=1):
            session: list[dict[str, str]] = []
            for mid in by_user[uid][day]:
                dia_of[mid] = f"D{n}:{len(session) + 1}"
                session.append({"speaker": name, "dia_id": dia_of[mid], "text": memories[mid]["event"]})
            conversation[f"session_{n}"] = session
            conversation[f"session_{n}_date_time"] = session_date_time(day)
        qa = []
        for d in dialogues:
            if d["user-id"] != uid:
                continue
            evidence = [dia_of[mid] for mid in d["relevant-id"] if mid in dia_of]
            if len(evidence) != len(d["relevant-id"]):
                raise HeldoutError(f"a dialogue of user {uid} names memories of another user or none")
            question = cue(d["dialogue"], min(d["test-turn"]))
            qa.append({"question": question, "answer": "", "evidence": evidence, "category": CATEGORY})
        questions += len(qa)
        samples.append({"sample_id": f"madial-{name.lower()}", "conversation": conversation, "qa": qa})
    return Built(samples, len(memories), questions)


def build(root: Path, out: Path, *, any_version: bool = False) -> Built:
    data: dict[Path, bytes] = {}
    for name, digest in SOURCE_SHA256.items():
        path = root / name
        if not path.is_file():
            raise HeldoutError(f"{path} is missing: pass the root of a MADial-Bench checkout")
        data[name] = path.read_bytes()
        actual = hashlib.sha256(data[name]).hexdigest()
        if not any_version and actual != digest:
            raise HeldoutError(
                f"{name} hashes to {actual}, not {digest} (hejunqing/MADial-Bench at commit "
                "572e3a10d6d01852a65e4508e0b3ab2a00d0710c)"
            )
    built = convert(_lines(data[MEMORY_FILE].decode()), _lines(data[DIALOGUE_FILE].decode()))
    out.write_text(json.dumps(built.samples, indent=1, ensure_ascii=False) + "\n")
    return built


def main(argv: list[str] | None = None) -> int:
    return build_main(
        argv,
        prog="python -m bench.heldout_madial",
        doc=__doc__,
        source="the root of a MADial-Bench checkout",
        build=build,
        refused=HeldoutError,
        describe=lambda out, built: (
            f"wrote {out}: {len(built.samples)} users, {built.memories} memories, {built.questions} questions"
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
