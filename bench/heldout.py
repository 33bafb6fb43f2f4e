"""A held-out retrieval set of our own: MemoryBank's English conversations, labelled by reading.

Nobody tunes the ranking on this set. It is run once, through ``bench.locomo``, and reported once;
LoCoMo's dev split stays the only place where search parameters are compared.

Source: the English evaluation data of MemoryBank (Zhong et al., 2023, "MemoryBank: Enhancing
Large Language Models with Long-Term Memory"), repository ``zhongwanjun/MemoryBank-SiliconFriend``
at commit ``cf61c4196e4cfdb0f2b7a0316249fa40312dc3a9``, MIT licence (Copyright (c) 2023 Wanjun
Zhong). The history is ``eval_data/en/memory_bank_en.json`` (sha256
``27c302202f9675d87dcaa73e3a42dc0fca8999dcff3c6e7882a787c8a08d9bc7``): 15 users, each talking to
an AI companion over ten days (27 April to 6 May 2023), as ``history: {date: [{query, response}]}``.
The data is not part of this repository; pass its path, as for LoCoMo. The converter refuses any
other version of the file, since the evidence ids would then point at other turns.

The questions are MemoryBank's 100 English probing questions (``probing_questions_en.jsonl``), which
come without answers or evidence. ``heldout_memorybank_labels.json`` (ours, committed) gives each
an answer, the dia ids of the turns that hold it and a LoCoMo category, written by reading each
user's whole history, with no search, embedding, BM25 or product run over the data. The categories,
in the order they were applied:

- 2 (temporal): the question names a day ("On May 4th, ..."), asks for a date or a duration, or
  points at a session by its place in time ("our first conversation");
- 3 (inference): the answer is not said in any turn but follows from what is said;
- 1 (multi-hop): the answer needs turns of more than one exchange, each holding a part of it;
- 4 (single-hop): one turn holds the answer. Further turns that hold it too (a fact said twice, a
  restated exchange) are listed as evidence without making the question multi-hop, and a yes/no
  check of a stated preference ("I don't like X, right?") is single-hop when a turn says it outright.

Evidence is the turn (the user's or the companion's) where the answer is said, not the question
that led to it; advice counts for the kind of request it answered (advice against anxiety is not
evidence for a question about stress). A question whose answer is in no turn is left out and listed with the reason under
``left_out``. Ambiguous cases carry a ``note``.

The conversion, one sample per user (``mb-<name>``, spaces as hyphens), in the LoCoMo shape that
``bench.locomo.load_locomo`` reads:

- one session per date with at least one exchange, in date order (a date with none is skipped, so
  session numbers count the user's days with a conversation);
- ``session_N_date_time`` is the date at a fixed 10:00 am ("10:00 am on 27 April, 2023"): the data
  has dates only, and ``bench.locomo`` keeps the date part;
- each exchange is two turns: the user's ``query`` (speaker: the user's name) and the companion's
  ``response`` (speaker: ``AI``; the data gives the companion no name), with dia ids ``D<session>:<n>``
  numbered from 1 within the session.

    python -m bench.heldout build PATH/memory_bank_en.json bench/heldout_memorybank_labels.json -o mb.json
    python -m bench.locomo mb.json --split all --via store,mcp      # once, for the published figure
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import Counter
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

LABELS = Path(__file__).with_name("heldout_memorybank_labels.json")
COMPANION = "AI"
SESSION_TIME = "10:00 am"


class HeldoutError(Exception):
    """The source or the labels do not match what the set was made from."""


@dataclass(frozen=True)
class Built:
    """What `convert` made: the LoCoMo-shaped samples and their counts."""

    samples: list[dict[str, Any]]
    sessions: int
    turns: int
    categories: Counter[int]


def sample_id(user: str) -> str:
    return "mb-" + "-".join(user.split())


def session_date_time(day: date) -> str:
    """A date in LoCoMo's style at the fixed time: ``10:00 am on 27 April, 2023``."""
    return f"{SESSION_TIME} on {day.day} {day:%B}, {day.year}"


def _conversation(
    history: dict[str, list[dict[str, str]]], user: str
) -> tuple[dict[str, Any], int, set[str]]:
    """One user's conversation in LoCoMo's shape, its number of sessions and its dia ids."""
    conversation: dict[str, Any] = {"speaker_a": user, "speaker_b": COMPANION}
    days = sorted((date.fromisoformat(d), exchanges) for d, exchanges in history.items() if exchanges)
    dia_ids: set[str] = set()
    for n, (day, exchanges) in enumerate(days, start=1):
        turns: list[dict[str, str]] = []
        for exchange in exchanges:
            for speaker, text in ((user, exchange["query"]), (COMPANION, exchange["response"])):
                turns.append({"speaker": speaker, "dia_id": f"D{n}:{len(turns) + 1}", "text": text})
        conversation[f"session_{n}"] = turns
        conversation[f"session_{n}_date_time"] = session_date_time(day)
        dia_ids.update(t["dia_id"] for t in turns)
    return conversation, len(days), dia_ids


def convert(source: dict[str, Any], labels: dict[str, Any]) -> Built:
    """The LoCoMo samples of a MemoryBank history, with the labelled questions as their ``qa``."""
    users = {str(u["name"]).strip(): u["history"] for u in source.values()}
    unknown = sorted({q["user"] for q in labels["questions"]} - users.keys())
    if unknown:
        raise HeldoutError(f"the labels name users the source does not have: {', '.join(unknown)}")
    samples, sessions, turns = [], 0, 0
    for user, history in users.items():
        conversation, n_sessions, dia_ids = _conversation(history, user)
        qa = []
        for q in (q for q in labels["questions"] if q["user"] == user):
            missing = sorted(set(q["evidence"]) - dia_ids)
            if missing:
                raise HeldoutError(f"{user}: {q['question']!r} names turns that do not exist: {missing}")
            qa.append({k: q[k] for k in ("question", "answer", "evidence", "category")})
        samples.append({"sample_id": sample_id(user), "conversation": conversation, "qa": qa})
        sessions += n_sessions
        turns += len(dia_ids)
    return Built(samples, sessions, turns, Counter(q["category"] for q in labels["questions"]))


def check_version(data: bytes, labels: dict[str, Any]) -> None:
    """Refuse a source file other than the one the labels were made on."""
    expected = labels["source"]["history_sha256"]
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        src = labels["source"]
        raise HeldoutError(
            f"this file's sha256 is {actual}, but the labels were made on {src['history']} of "
            f"{src['repository']} at commit {src['commit']} (sha256 {expected}); another version "
            "would put the evidence ids on other turns, so it is refused"
        )


def build(source: Path, labels_path: Path, out: Path, *, any_version: bool = False) -> Built:
    data = source.read_bytes()
    labels = json.loads(labels_path.read_text())
    if not any_version:
        check_version(data, labels)
    built = convert(json.loads(data), labels)
    out.write_text(json.dumps(built.samples, indent=1, ensure_ascii=False) + "\n")
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.heldout",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="write the LoCoMo-format file of the held-out set")
    make.add_argument("source", type=Path, help="MemoryBank's eval_data/en/memory_bank_en.json")
    make.add_argument("labels", type=Path, nargs="?", default=LABELS, help="the labels file (default: ours)")
    make.add_argument("-o", "--output", type=Path, required=True)
    make.add_argument(
        "--any-version", action="store_true", help="skip the sha256 check (for the tests' synthetic source)"
    )
    args = parser.parse_args(argv)
    try:
        built = build(args.source, args.labels, args.output, any_version=args.any_version)
    except HeldoutError as e:
        print(f"bench.heldout: {e}", file=sys.stderr)
        return 2
    by_category = ", ".join(f"category {c}: {n}" for c, n in sorted(built.categories.items()))
    print(
        f"wrote {args.output}: {len(built.samples)} users, {built.sessions} sessions, {built.turns} turns, "
        f"{sum(built.categories.values())} questions ({by_category})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
