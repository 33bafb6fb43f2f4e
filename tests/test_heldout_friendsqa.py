"""The FriendsQA held-out set's converter: a synthetic source in FriendsQA's shape becomes what
``bench.locomo`` loads, each episode's scenes the sessions of one sample and each question's
evidence the lines its answers lie in. The synthetic files are not the published ones, so these
runs pass ``--any-version``; one run checks that the published hashes are enforced."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import heldout_friendsqa as fq
from bench.locomo import load_locomo

ROOT = Path(__file__).resolve().parents[1]


def _scene(
    title: str, lines: list[tuple[list[str], str]], qas: list[tuple[str, str, list[int]]]
) -> dict[str, Any]:
    utterances = [{"uid": i, "speakers": who, "utterance": said} for i, (who, said) in enumerate(lines)]
    questions = [
        {
            "id": f"{title}_{kind}",
            "question": question,
            "answers": [
                {
                    "answer_text": f"line {u}",
                    "utterance_id": u,
                    "inner_start": 0,
                    "inner_end": 1,
                    "is_speaker": False,
                }
                for u in uids
            ],
        }
        for kind, question, uids in qas
    ]
    return {"title": title, "paragraphs": [{"utterances:": utterances, "qas": questions}]}


ROSS, RACHEL, NOTE = ["Ross Geller"], ["Rachel Green"], ["#NOTE#"]
# Episode 1 of season 1: its second scene is in the test file and comes first there.
DEV = [
    _scene(
        "s01_e01_c02",
        [
            (NOTE, "[ Scene : Central Perk , Ross is entering . ]"),
            (ROSS, "I do n't know , I 'm gon na name him Jamie ."),
            (RACHEL, "   "),  # an empty line is no turn: the dia ids after it close up
            (["Rachel Green", "Monica Geller"], "( together ) Jamie ?!"),
        ],
        [
            ("What", "What does Ross want to name his son ?", [1]),
            ("Where_Paraphrased", "In which place was Ross ?", [0]),
            # Two annotators, two lines: either answers it.
            ("Who", "Who is surprised by the name ``Jamie'' ?", [3, 1, 3]),
        ],
    ),
    _scene("s02_e03_c01", [(RACHEL, "We were on a break !"), (ROSS, "Got ta go .")], [("Why", "Why ?", [0])]),
]
TST = [
    _scene(
        "s01_e01_c01",
        [(ROSS, "Hi ."), (RACHEL, "She 's got ta be kidding\x02.")],
        [("When", "When does Rachel speak ?", [1]), ("How_Paraphrased", "How is she ?", [1])],
    )
]


def _source(tmp_path: Path, dev: list[dict[str, Any]], tst: list[dict[str, Any]] | None) -> Path:
    (tmp_path / fq.DATA).mkdir(parents=True)
    (tmp_path / fq.DATA / "friendsqa_dev.json").write_text(json.dumps({"data": dev, "version": "2.0"}))
    if tst is not None:
        (tmp_path / fq.DATA / "friendsqa_tst.json").write_text(json.dumps({"data": tst, "version": "2.0"}))
    return tmp_path


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.heldout_friendsqa", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


def test_each_episode_is_a_conversation_and_each_question_asks_for_the_lines_it_is_answered_by(
    tmp_path: Path,
) -> None:
    out = tmp_path / "friendsqa.json"
    done = _run("build", _source(tmp_path / "src", DEV, TST), "-o", out, "--any-version")
    assert done.returncode == 0, done.stderr
    assert "2 episodes, 3 scenes, 7 turns, 6 questions (1 with several evidence turns" in done.stdout
    assert "by category 2: 1, 3: 2, 4: 3)" in done.stdout
    first, second = load_locomo(out)
    assert first.sample_id == "friendsqa-s01e01" and second.sample_id == "friendsqa-s02e03"
    # Scenes in scene order across both files; detokenized text; stage directions spoken by Note.
    assert [(t.dia_id, t.session, t.text) for t in first.turns] == [
        ("D1:1", 1, "Ross Geller (1 January, 2000): Hi."),
        ("D1:2", 1, "Rachel Green (1 January, 2000): She's gotta be kidding."),
        ("D2:1", 2, "Note (1 January, 2000): [Scene: Central Perk, Ross is entering.]"),
        ("D2:2", 2, "Ross Geller (1 January, 2000): I don't know, I'm gonna name him Jamie."),
        ("D2:3", 2, "Rachel Green and Monica Geller (1 January, 2000): (together) Jamie?!"),
    ]
    assert [(q.text, q.evidence, q.category) for q in first.questions] == [
        ("When does Rachel speak?", frozenset({"D1:2"}), 2),
        ("How is she?", frozenset({"D1:2"}), 3),
        ("What does Ross want to name his son?", frozenset({"D2:2"}), 4),
        ("In which place was Ross?", frozenset({"D2:1"}), 4),
        ('Who is surprised by the name "Jamie"?', frozenset({"D2:2", "D2:3"}), 4),
    ]
    assert [(q.text, q.evidence, q.category) for q in second.questions] == [("Why?", frozenset({"D1:1"}), 3)]
    raw = json.loads(out.read_text())
    assert raw[0]["conversation"]["speaker_a"] in {"Ross Geller", "Rachel Green"}
    assert raw[1]["conversation"]["session_1"][1]["text"] == "Gotta go."


def test_another_version_or_a_broken_source_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = _run("build", _source(tmp_path / "a", DEV, TST), "-o", out)
    assert done.returncode == 2 and "hashes to" in done.stderr and fq.COMMIT in done.stderr
    done = _run("build", _source(tmp_path / "b", DEV, None), "-o", out, "--any-version")
    assert done.returncode == 2 and "holds no friendsqa_tst.json" in done.stderr
    done = _run("build", _source(tmp_path / "c", DEV, DEV[:1]), "-o", out, "--any-version")
    assert done.returncode == 2 and "is in the data twice" in done.stderr
    # A question whose answer lies in no line of its scene (here: the empty one) is not guessed at.
    empty = [_scene("s01_e01_c01", [(ROSS, "Hi ."), (RACHEL, " ")], [("What", "What ?", [1])])]
    done = _run("build", _source(tmp_path / "d", DEV, empty), "-o", out, "--any-version")
    assert done.returncode == 2 and "names no line of its scene" in done.stderr
    unknown = [_scene("s01_e01_c01", [(ROSS, "Hi .")], [("Whom", "Whom ?", [0])])]
    done = _run("build", _source(tmp_path / "e", DEV, unknown), "-o", out, "--any-version")
    assert done.returncode == 2 and "names no kind of question" in done.stderr
    assert not out.exists()
