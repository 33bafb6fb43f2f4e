"""The held-out MemoryBank set: the committed labels are well-formed, and the converter writes what
``bench.locomo`` loads.

MemoryBank's data is not in the repository, so the converter runs here on a small synthetic history
in MemoryBank's shape; that file has another sha256, so these runs pass ``--any-version``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from bench import heldout
from bench.locomo import load_locomo

ROOT = Path(__file__).resolve().parents[1]
DIA_ID = re.compile(r"D[1-9][0-9]*:[1-9][0-9]*")
SECTION = "## A held-out set of our own (MemoryBank)"

# The counts docs/performance.md gives for the labels (MemoryBank has 100 English probing questions).
USERS = 15
QUESTIONS = 99
LEFT_OUT = 1
BY_CATEGORY = {1: 3, 2: 36, 3: 1, 4: 59}


def _labels() -> dict[str, Any]:
    labels: dict[str, Any] = json.loads(heldout.LABELS.read_text())
    return labels


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.heldout", *map(str, args)], cwd=ROOT, capture_output=True, text=True
    )


def test_every_question_has_evidence_ids_a_category_and_an_answer() -> None:
    for q in _labels()["questions"]:
        assert set(q) <= {"user", "question", "answer", "evidence", "category", "note"}, q
        assert q["question"].strip() and q["answer"].strip(), q
        assert q["evidence"] and all(DIA_ID.fullmatch(e) for e in q["evidence"]), q
        assert len(set(q["evidence"])) == len(q["evidence"]), q
        assert q["category"] in (1, 2, 3, 4), q
        assert "note" not in q or q["note"].strip(), q


def test_no_question_twice_and_none_both_labelled_and_left_out() -> None:
    labels = _labels()
    labelled = [(q["user"], q["question"].strip('" ').lower()) for q in labels["questions"]]
    left_out = [(q["user"], q["question"].strip('" ').lower()) for q in labels["left_out"]]
    assert len(set(labelled)) == len(labelled)
    assert not set(labelled) & set(left_out)
    assert all(q["reason"].strip() for q in labels["left_out"])


def test_counts_are_the_documented_ones() -> None:
    labels = _labels()
    questions = labels["questions"]
    assert len({q["user"] for q in questions}) == USERS
    assert len(questions) == QUESTIONS
    assert len(labels["left_out"]) == LEFT_OUT
    assert dict(Counter(q["category"] for q in questions)) == BY_CATEGORY
    section = (ROOT / "docs" / "performance.md").read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    for figure in (f"{USERS} users", f"{QUESTIONS} questions", f"{LEFT_OUT} left out"):
        assert figure in section
    row = " | ".join(str(BY_CATEGORY[c]) for c in (1, 2, 3, 4))
    assert f"| {row} | {QUESTIONS} |" in section


def test_the_provenance_in_the_docstring_is_the_labels_source() -> None:
    source = _labels()["source"]
    doc = " ".join((heldout.__doc__ or "").split())
    for value in (source["repository"], source["commit"], source["history"], source["history_sha256"]):
        assert value in doc
    assert source["history_sha256"] in (ROOT / "docs" / "performance.md").read_text()


def _synthetic(tmp_path: Path) -> tuple[Path, Path]:
    """Two users in MemoryBank's shape (names padded as in the real file, dates out of order, one
    date without exchanges) and labels for them."""
    source = {
        " Ann Lee ": {
            "name": "Ann Lee",
            "summary": {},
            "personality": {},
            "overall_history": "",
            "meta_information": {"name": "Ann Lee"},
            "history": {
                "2023-05-02": [
                    {"query": "I adopted a cat  named Miso.", "response": "Miso is a lovely name!"}
                ],
                "2023-04-30": [],
                "2023-04-27": [
                    {"query": "Hi, I'm Ann.", "response": "Hello Ann, I'm your AI companion."},
                    {"query": "I love rowing.", "response": "Try the river club on Sundays."},
                ],
            },
        },
        "Bo": {
            "name": "Bo",
            "history": {"2023-04-28": [{"query": "I ran 5 km today.", "response": "Well done, Bo."}]},
        },
    }
    labels = {
        "source": {**_labels()["source"]},
        "questions": [
            {
                "user": "Ann Lee",
                "question": "What is my cat called?",
                "answer": "Miso",
                "evidence": ["D2:1"],
                "category": 4,
            },
            {
                "user": "Ann Lee",
                "question": "On April 27th, what did you suggest for rowing?",
                "answer": "The river club on Sundays",
                "evidence": ["D1:4", "D1:3"],
                "category": 2,
                "note": "a note stays in the labels, out of the converted file",
            },
            {
                "user": "Bo",
                "question": "How far did I run?",
                "answer": "5 km",
                "evidence": ["D1:1"],
                "category": 4,
            },
        ],
        "left_out": [],
    }
    src, lab = tmp_path / "memory_bank_en.json", tmp_path / "labels.json"
    src.write_text(json.dumps(source))
    lab.write_text(json.dumps(labels))
    return src, lab


def test_the_converted_file_is_what_the_locomo_loader_reads(tmp_path: Path) -> None:
    src, lab = _synthetic(tmp_path)
    out = tmp_path / "mb.json"
    result = _run("build", src, lab, "-o", out, "--any-version")
    assert result.returncode == 0, result.stderr
    assert "2 users, 3 sessions, 8 turns, 3 questions (category 2: 1, category 4: 2)" in result.stdout

    raw = json.loads(out.read_text())
    ann = raw[0]["conversation"]
    assert (ann["speaker_a"], ann["speaker_b"]) == ("Ann Lee", "AI")
    assert ann["session_1_date_time"] == "10:00 am on 27 April, 2023"
    assert ann["session_2_date_time"] == "10:00 am on 2 May, 2023"
    assert "session_3" not in ann  # 30 April had no exchange
    assert raw[0]["qa"][1] == {
        "question": "On April 27th, what did you suggest for rowing?",
        "answer": "The river club on Sundays",
        "evidence": ["D1:4", "D1:3"],
        "category": 2,
    }

    conversations = load_locomo(out)
    assert [c.sample_id for c in conversations] == ["mb-Ann-Lee", "mb-Bo"]
    assert [c.space for c in conversations] == ["mb-ann-lee", "mb-bo"]
    ann_turns = {t.dia_id: (t.session, t.text) for t in conversations[0].turns}
    assert ann_turns == {
        "D1:1": (1, "Ann Lee (27 April, 2023): Hi, I'm Ann."),
        "D1:2": (1, "AI (27 April, 2023): Hello Ann, I'm your AI companion."),
        "D1:3": (1, "Ann Lee (27 April, 2023): I love rowing."),
        "D1:4": (1, "AI (27 April, 2023): Try the river club on Sundays."),
        "D2:1": (2, "Ann Lee (2 May, 2023): I adopted a cat named Miso."),
        "D2:2": (2, "AI (2 May, 2023): Miso is a lovely name!"),
    }
    assert [(q.text, q.category, q.evidence) for q in conversations[0].questions] == [
        ("What is my cat called?", 4, frozenset({"D2:1"})),
        ("On April 27th, what did you suggest for rowing?", 2, frozenset({"D1:3", "D1:4"})),
    ]
    assert [(q.text, q.evidence) for q in conversations[1].questions] == [
        ("How far did I run?", frozenset({"D1:1"}))
    ]


def test_another_version_of_the_source_is_refused(tmp_path: Path) -> None:
    src, lab = _synthetic(tmp_path)
    out = tmp_path / "mb.json"
    result = _run("build", src, lab, "-o", out)
    assert result.returncode == 2
    source = _labels()["source"]
    assert source["history_sha256"] in result.stderr and source["commit"] in result.stderr
    assert not out.exists()


def test_labels_naming_a_turn_the_source_lacks_are_refused(tmp_path: Path) -> None:
    src, lab = _synthetic(tmp_path)
    labels = json.loads(lab.read_text())
    labels["questions"][0]["evidence"] = ["D2:3"]
    lab.write_text(json.dumps(labels))
    out = tmp_path / "mb.json"
    result = _run("build", src, lab, "-o", out, "--any-version")
    assert result.returncode == 2
    assert "What is my cat called?" in result.stderr and "D2:3" in result.stderr
    assert not out.exists()
