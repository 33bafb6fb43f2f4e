"""The MADial-Bench held-out set's converter: a synthetic source in MADial-Bench's shape becomes
what ``bench.locomo`` loads, each user's memories in its own sample and each dialogue a question
cued by the conversation before its test turn. The synthetic files are not the published ones, so
these runs pass ``--any-version``; one run checks that the published hashes are enforced."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench import heldout_madial as md
from bench.locomo import load_locomo

ROOT = Path(__file__).resolve().parents[1]

MEMORIES = [
    {"1": {"time": "2023-12-25", "scene": "Activity", "event": "Bart danced at the Christmas party."}},
    {"2": {"time": "2023-03-07", "scene": "Activity", "event": "Lisa won the science fair."}},
    {"3": {"time": "2023-12-25", "scene": "Preferences", "event": "Bart loves mango ice cream."}},
    {"4": {"time": "2022-01-01", "scene": "Others", "event": "Bart learnt a card trick."}},
]
DIALOGUES = [
    {
        "dialogue": [
            "<BOD>\n",
            '<Bart>: "I will do a magic trick at the party!"\n',
            '<Assistant>: "Wonderful!"\n',
            '<Bart>: "What should I wear?"\n',
            '<Assistant>: "Remember the Christmas party? You danced so well."\n',
            "<EOD>\n",
        ],
        "test-turn": [4],
        "relevant-id": [1, 4],
        "user-id": 1,
    },
    {
        "dialogue": [
            "<BOD>\n",
            '<Lisa>: "My teacher praised me."\n',
            '<Assistant>: "The fair!"\n',
            "<EOD>\n",
        ],
        "test-turn": [2],
        "relevant-id": [2],
        "user-id": 2,
    },
]


def _source(tmp_path: Path, memories: list[dict[str, dict[str, str]]] = MEMORIES) -> Path:
    (tmp_path / md.MEMORY_FILE).parent.mkdir(parents=True)
    (tmp_path / md.MEMORY_FILE).write_text("".join(json.dumps(m) + "\n" for m in memories))
    (tmp_path / md.DIALOGUE_FILE).write_text("".join(json.dumps(d) + "\n" for d in DIALOGUES))
    return tmp_path


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.heldout_madial", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


def test_each_user_holds_the_memories_naming_them_and_each_dialogue_cues_a_question(tmp_path: Path) -> None:
    out = tmp_path / "madial.json"
    done = _run("build", _source(tmp_path / "src"), "-o", out, "--any-version")
    assert done.returncode == 0, done.stderr
    assert "2 users, 4 memories, 2 questions" in done.stdout
    bart, lisa = load_locomo(out)
    # Sessions are the memories' dates in order; one date may hold several memories.
    assert [t.text for t in bart.turns] == [
        "Bart (1 January, 2022): Bart learnt a card trick.",
        "Bart (25 December, 2023): Bart danced at the Christmas party.",
        "Bart (25 December, 2023): Bart loves mango ice cream.",
    ]
    assert [t.dia_id for t in bart.turns] == ["D1:1", "D2:1", "D2:2"]
    (question,) = bart.questions
    # The cue is the conversation before the test turn, without the marks; the test turn is not in it.
    assert (
        question.text
        == "Bart: I will do a magic trick at the party!\nAssistant: Wonderful!\nBart: What should I wear?"
    )
    assert question.evidence == frozenset({"D2:1", "D1:1"})
    assert [t.text for t in lisa.turns] == ["Lisa (7 March, 2023): Lisa won the science fair."]
    assert lisa.questions[0].text == "Lisa: My teacher praised me." and lisa.questions[0].evidence == {"D1:1"}


def test_another_version_of_the_data_or_a_memory_of_nobody_is_refused(tmp_path: Path) -> None:
    done = _run("build", _source(tmp_path / "a"), "-o", tmp_path / "out.json")
    assert done.returncode == 2 and "hashes to" in done.stderr and "572e3a10" in done.stderr
    stray = [*MEMORIES, {"5": {"time": "2023-01-01", "event": "Bart and Lisa met."}}]
    done = _run("build", _source(tmp_path / "b", stray), "-o", tmp_path / "out.json", "--any-version")
    assert done.returncode == 2 and "names 2 of the users" in done.stderr
    assert not (tmp_path / "out.json").exists()
