"""A fifth held-out retrieval set: FriendsQA's questions over TV dialogue, each scene of an episode
a session of one long conversation among the same friends, and each question asking for the lines
that answer it.

Nobody tunes the ranking on this set. It is built before the ranking it judges is final, run once
through ``bench.locomo`` at the end and reported once. (MemoryBank's set, ``bench/heldout.py``,
PrefEval's, ``bench/heldout_prefeval.py``, MADial-Bench's, ``bench/heldout_madial.py``, and
RealMem's, ``bench/heldout_realmem.py``, have been run and are spent.)

Source: FriendsQA (Yang and Choi, SIGDIAL 2019, "FriendsQA: Open-Domain Question Answering on TV
Show Transcripts"; Li and Choi, ACL 2020), repository ``emorynlp/FriendsQA`` at commit
``9ce6c98a6acf13c87d96b6811e4409b5de43bdfe``, licence Apache 2.0 (its ``LICENSE.txt``); the data is
read from a checkout at run time and never committed. The files are ``dat/friendsqa_dev.json`` and
``dat/friendsqa_tst.json``, the benchmark's development and test splits (the scenes of episodes 21
onward of seasons 1 to 4); the training split is not read. Each scene is a dialogue: its
utterances (an id, the speakers, the text, tokenized), with questions written by annotators about
it, each answered by spans that name the utterance they lie in (``utterance_id``; where the answer
is a speaker, the utterance that speaker says). The sha256 of each file is ``SOURCE_SHA256``
below; the converter refuses any other version.

What the set asks: in an episode's whole dialogue, a few hundred lines of six friends talking over
a dozen scenes, find the line that answers a question about what was said or done ("What does Ross
want to name his son?", "Why is Chandler upset?"), the way an assistant recalls a detail from
earlier conversation. The answer is one line among many on the same people and the same story;
half the questions were paraphrased by the annotators to share fewer words with the dialogue.

The conversion, in the LoCoMo shape that ``bench.locomo.load_locomo`` reads:

- each episode is a sample (``friendsqa-s01e21``), its scenes the sessions in scene order, every
  scene at a fixed 10:00 am on 1 January 2000 (the data has no dates); each utterance is a turn,
  spoken by its speakers (several joined with "and"; the transcript's stage directions, speaker
  ``#NOTE#``, by ``Note``);
- the text of turns and questions is detokenized: punctuation, closing brackets and clitics
  ("'s", "n't", "'re"...) are joined to the word before them, opening brackets to the word after,
  "gon na", "wan na" and "got ta" are one word again, ``` `` ``` and ``''`` are straight double
  quotes; whitespace is collapsed and control characters become spaces;
- a question is every question of the scene, the paraphrased ones included; its text is the
  question's (at most ``MAX_QUERY``); its LoCoMo category follows its kind, which the question's id
  names: "When" 2 (time), "Why" and "How" 3 (an inference about the speakers), "What", "Who" and
  "Where" 4 (one fact);
- its evidence is the turn of every answer's ``utterance_id``. Answers from different annotators
  may name different lines: they are alternatives, any one of them answers the question (hit@k
  counts that; recall@k, the share of them found, reads low on such questions). No question is
  left out: a source with an answer in no line of its scene is refused rather than guessed at.

From the published files: 17 episodes, 249 scenes, 5,183 turns (211 to 588 an episode), 2,383
questions (63 to 236 an episode; 2,032 with one evidence turn, 351 with several); by category 316
of 2, 761 of 3, 1,306 of 4.

    python -m bench.heldout_friendsqa build PATH/FriendsQA -o friendsqa.json
    python -m bench.locomo friendsqa.json --split all --via store,mcp      # once, for the published figure
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.heldout_cli import build_main
from memory_mcp.store.validation import MAX_CONTENT, MAX_QUERY

COMMIT = "9ce6c98a6acf13c87d96b6811e4409b5de43bdfe"
DATA = Path("dat")
SOURCE_SHA256 = {
    "friendsqa_dev.json": "3a85d3fcb175589ffd050fb4bf431da77a6e12589c8ec03f1d54060ce33ec703",
    "friendsqa_tst.json": "a98f24d4b04ac9f8d9468088febf304bd90eada134537277c1a425e31c0372bc",
}
SESSION_DATE_TIME = "10:00 am on 1 January, 2000"
NOTE, NOTE_SPEAKER = "#NOTE#", "Note"
CATEGORY = {"When": 2, "Why": 3, "How": 3, "What": 4, "Who": 4, "Where": 4}
_SCENE = re.compile(r"^s(\d+)_e(\d+)_c(\d+)$")
_KIND = re.compile(r"^s\d+_e\d+_c\d+_([A-Za-z]+)(?:_|$)")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_DETOKENIZE = (
    (re.compile(r"``|''"), '"'),
    (re.compile(r"\b([Gg]on|[Ww]an) na\b"), r"\1na"),
    (re.compile(r"\b([Gg]ot) ta\b"), r"\1ta"),
    (re.compile(r" (n't|'s|'re|'m|'ll|'ve|'d)(?=\s|$|[.,!?;:])"), r"\1"),
    (re.compile(r"([(\[{]) "), r"\1"),
    (re.compile(r" ([)\]}])"), r"\1"),
    (re.compile(r" ([.,!?;:]+)(?=\s|$|[)\]}])"), r"\1"),
)


class HeldoutError(Exception):
    """The source is not the version the set was made from, or not FriendsQA's shape."""


@dataclass(frozen=True)
class Built:
    samples: list[dict[str, Any]]
    scenes: int
    turns: int
    questions: int
    several: int
    by_category: dict[int, int]


def text(value: Any) -> str:
    """``value`` detokenized, whitespace collapsed and control characters as spaces."""
    out = " ".join(_CONTROL.sub(" ", str(value)).split())
    for pattern, repl in _DETOKENIZE:
        out = pattern.sub(repl, out)
    return out


def speaker(speakers: Any) -> str:
    names = [NOTE_SPEAKER if s == NOTE else text(s) for s in speakers or ()]
    if not names or not all(names):
        raise HeldoutError(f"an utterance has no speaker: {speakers!r}")
    return " and ".join(names)


def category(question_id: str) -> int:
    found = _KIND.match(question_id)
    if not found or found.group(1) not in CATEGORY:
        raise HeldoutError(f"a question's id names no kind of question: {question_id!r}")
    return CATEGORY[found.group(1)]


def scenes(data: dict[str, Any], name: str) -> list[tuple[tuple[int, int, int], dict[str, Any]]]:
    """The scenes of one file, each with (season, episode, scene) read from its title."""
    out = []
    for item in data.get("data") or []:
        found = _SCENE.match(str(item.get("title", "")))
        paragraphs = item.get("paragraphs")
        if not found or not isinstance(paragraphs, list) or len(paragraphs) != 1:
            raise HeldoutError(f"{name}: a scene is not one titled dialogue: {item.get('title')!r}")
        out.append(((int(found[1]), int(found[2]), int(found[3])), paragraphs[0]))
    if not out:
        raise HeldoutError(f"{name}: no scenes")
    return out


def convert_episode(
    season: int, episode: int, parts: list[tuple[int, dict[str, Any]]]
) -> tuple[dict[str, Any], int, int]:
    """One episode's sample: its scenes in order as sessions, and every question about them.
    Returns the sample, its turns and how many of its questions have several evidence turns."""
    conversation: dict[str, Any] = {}
    qa: list[dict[str, Any]] = []
    turns = several = 0
    speakers: list[str] = []
    title = f"s{season:02d}e{episode:02d}"
    for n, (_, scene) in enumerate(sorted(parts, key=lambda p: p[0]), start=1):
        dia_of: dict[int, str] = {}
        session: list[dict[str, str]] = []
        for utterance in scene.get("utterances:") or []:
            said, who = text(utterance.get("utterance", "")), speaker(utterance.get("speakers"))
            if not said:
                continue
            uid = utterance["uid"]
            if uid in dia_of:
                raise HeldoutError(f"{title}: scene {n} has utterance {uid} twice")
            if len(f"{who} ({SESSION_DATE_TIME.split(' on ', 1)[1]}): {said}") > MAX_CONTENT:
                raise HeldoutError(f"{title}: utterance {uid} of scene {n} is longer than one memory")
            dia_of[uid] = f"D{n}:{len(session) + 1}"
            session.append({"speaker": who, "dia_id": dia_of[uid], "text": said})
            speakers.extend(who.split(" and "))
        conversation[f"session_{n}"] = session
        conversation[f"session_{n}_date_time"] = SESSION_DATE_TIME
        turns += len(session)
        for question in scene.get("qas") or []:
            answers = question.get("answers") or []
            missing = [a.get("utterance_id") for a in answers if a.get("utterance_id") not in dia_of]
            if not answers or missing:
                raise HeldoutError(f"{title}: question {question.get('id')!r} names no line of its scene")
            evidence = sorted(
                {dia_of[a["utterance_id"]] for a in answers}, key=lambda d: int(d.split(":")[1])
            )
            several += len(evidence) > 1
            qa.append(
                {
                    "question": text(question["question"])[:MAX_QUERY],
                    "answer": text(answers[0].get("answer_text", "")),
                    "evidence": evidence,
                    "category": category(str(question.get("id", ""))),
                }
            )
    # LoCoMo names two speakers: the two who say the most lines.
    lines = Counter(speakers)
    del lines[NOTE_SPEAKER]
    top = [name for name, _ in lines.most_common(2)] + ["", ""]
    conversation = {"speaker_a": top[0], "speaker_b": top[1], **conversation}
    return {"sample_id": f"friendsqa-{title}", "conversation": conversation, "qa": qa}, turns, several


def build(root: Path, out: Path, *, any_version: bool = False) -> Built:
    folder = root / DATA
    files = {name: folder / name for name in SOURCE_SHA256}
    absent = [name for name, path in files.items() if not path.is_file()]
    if absent:
        raise HeldoutError(f"{folder} holds no {', '.join(absent)}: pass the root of a FriendsQA checkout")
    data = {name: path.read_bytes() for name, path in files.items()}
    if not any_version:
        for name, raw in data.items():
            actual = hashlib.sha256(raw).hexdigest()
            if actual != SOURCE_SHA256[name]:
                raise HeldoutError(
                    f"{name} hashes to {actual}, not {SOURCE_SHA256[name]} (emorynlp/FriendsQA at commit {COMMIT})"
                )
    episodes: dict[tuple[int, int], list[tuple[int, dict[str, Any]]]] = {}
    seen: set[tuple[int, int, int]] = set()
    for name, raw in data.items():
        for key, scene in scenes(json.loads(raw), name):
            if key in seen:
                raise HeldoutError(f"{name}: scene {key} is in the data twice")
            seen.add(key)
            episodes.setdefault(key[:2], []).append((key[2], scene))
    samples, turns, several = [], 0, 0
    for (season, episode), parts in sorted(episodes.items()):
        sample, n, m = convert_episode(season, episode, parts)
        samples.append(sample)
        turns, several = turns + n, several + m
    by_category = Counter(q["category"] for s in samples for q in s["qa"])
    out.write_text(json.dumps(samples, indent=1, ensure_ascii=False) + "\n")
    questions = sum(by_category.values())
    return Built(samples, len(seen), turns, questions, several, dict(sorted(by_category.items())))


def main(argv: list[str] | None = None) -> int:
    return build_main(
        argv,
        prog="python -m bench.heldout_friendsqa",
        doc=__doc__,
        source="the root of a FriendsQA checkout",
        build=build,
        refused=HeldoutError,
        describe=lambda out, built: (
            f"wrote {out}: {len(built.samples)} episodes, {built.scenes} scenes, {built.turns} turns, "
            f"{built.questions} questions ({built.several} with several evidence turns; by category "
            + ", ".join(f"{c}: {n}" for c, n in built.by_category.items())
            + ")"
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
