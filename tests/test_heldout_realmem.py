"""The RealMem held-out set's converter: a synthetic source in RealMem's shape becomes what
``bench.locomo`` loads, each persona's history in its own sample and each query a question whose
evidence is the turns its memories came from. The synthetic files are not the published ones, so
these runs pass ``--any-version``; one run checks that the published hashes are enforced."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import heldout_realmem as rm
from bench.locomo import load_locomo

ROOT = Path(__file__).resolve().parents[1]

LONG = " ".join(f"Step {i} of the plan is to read one more page." for i in range(100))


def _turn(
    speaker: str, content: str, query: bool = False, used: Sequence[tuple[str, str]] = ()
) -> dict[str, Any]:
    turn: dict[str, Any] = {"speaker": speaker, "is_query": query, "content": content, "query_id": None}
    if used:
        turn["memory_used"] = [{"session_uuid": s, "content": c} for s, c in used]
        turn["memory_session_uuids"] = sorted({s for s, _ in used})
    return turn


def _memory(uuid: str, content: str, snapshot: str, kind: str = "Dynamic") -> dict[str, Any]:
    return {
        "index": f"{uuid}-01",
        "type": kind,
        "content": content,
        "source_turn": 1,
        "source_content_snapshot": snapshot,
        "source_role_snapshot": "User",
        "session_uuid": uuid,
    }


def _session(
    uuid: str, day: str, turns: list[dict[str, Any]], memories: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    return {
        "session_identifier": f"Topic:{uuid}",
        "session_uuid": uuid,
        "current_time": f"{day} (Monday)",
        "dialogue_turns": turns,
        "extracted_memory": list(memories),
    }


SPANISH = "I want to learn Spanish."
DOG = "I walk my dog every morning."
MOVED = "Remind me of my plan, I also moved to Madrid."
ANN = [
    _session(
        "a1",
        "2025-03-02",
        [_turn("User", SPANISH), _turn("Assistant", "Start with ten words a day.")],
        [
            _memory("a1", "Goal: Spanish", SPANISH),
            _memory("a1", "Review on Monday", "Review on Monday", "Schedule"),
        ],
    ),
    # Filed after a1 but dated before it: it comes first.
    _session(
        "b1", "2025-03-01", [_turn("User", DOG), _turn("Assistant", LONG)], [_memory("b1", "Has a dog", DOG)]
    ),
    _session(
        "c1",
        "2025-03-05",
        [
            _turn("User", "I finished   the first lesson,\nwhat next?", query=True),
            _turn("Assistant", "Ten more words.", used=[("a1", "Goal: Spanish"), ("b1", "Has a dog")]),
            # A schedule item has no turn: this question is left out, its turns stay history.
            _turn("User", "Can you plan my week?", query=True),
            _turn("Assistant", "Monday: review.", used=[("a1", "Review on Monday")]),
            _turn("User", "  "),
        ],
    ),
    # This query's own turn is the next question's evidence: it stays, and its question goes.
    _session(
        "d1",
        "2025-03-06",
        [
            _turn("User", MOVED, query=True),
            _turn("Assistant", "Ten words a day.", used=[("a1", "Goal: Spanish")]),
        ],
        [_memory("d1", "Lives in Madrid", MOVED)],
    ),
    _session(
        "e1",
        "2025-03-07",
        [
            _turn("User", "Where should I practise?", query=True),
            _turn("Assistant", "At a Madrid cafe.", used=[("d1", "Lives in Madrid")]),
        ],
    ),
]
# A control character (one turn of the published files has one) becomes a space: a memory holds none.
BO = [_session("z1", "2024-12-31", [_turn("User", "Hello.\x02"), _turn("Assistant", "Hi\x7f!")])]


def _source(tmp_path: Path, personas: dict[str, list[dict[str, Any]]]) -> Path:
    (tmp_path / rm.DATASET).mkdir(parents=True)
    for name, sessions in personas.items():
        data = {"_metadata": {"person_name": name}, "dialogues": sessions}
        (tmp_path / rm.DATASET / f"{name}{rm.SUFFIX}").write_text(json.dumps(data))
    return tmp_path


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.heldout_realmem", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


def test_each_query_asks_for_the_turns_its_memories_came_from_in_the_history_without_it(
    tmp_path: Path,
) -> None:
    out = tmp_path / "realmem.json"
    done = _run(
        "build", _source(tmp_path / "src", {"Ann_Lee": ANN, "Bo_Chen": BO}), "-o", out, "--any-version"
    )
    assert done.returncode == 0, done.stderr
    pieces = rm.parts(LONG)
    assert len(pieces) > 1 and " ".join(pieces) == LONG
    assert all(len(p) <= rm.MAX_TURN and p.endswith(".") for p in pieces)
    assert f"2 personas, 5 sessions, 10 turns ({10 + len(pieces) - 1} memories), 2 questions" in done.stdout
    assert "(1 left out: a memory used names no single turn; 1 left out: their turns" in done.stdout
    ann, bo = load_locomo(out)
    assert ann.sample_id == "realmem-ann-lee" and [t.text for t in bo.turns] == [
        "Bo Chen (31 December, 2024): Hello.",
        "Assistant (31 December, 2024): Hi !",
    ]
    # Sessions in date order; the asked queries and their answers, the empty turn and the session
    # left empty are gone; a long turn is several memories under one dia id.
    assert [(t.dia_id, t.text) for t in ann.turns] == [
        ("D1:1", f"Ann Lee (1 March, 2025): {DOG}"),
        *[("D1:2", f"Assistant (1 March, 2025): {p}") for p in pieces],
        ("D2:1", f"Ann Lee (2 March, 2025): {SPANISH}"),
        ("D2:2", "Assistant (2 March, 2025): Start with ten words a day."),
        ("D3:1", "Ann Lee (5 March, 2025): Can you plan my week?"),
        ("D3:2", "Assistant (5 March, 2025): Monday: review."),
        ("D4:1", f"Ann Lee (6 March, 2025): {MOVED}"),
        ("D4:2", "Assistant (6 March, 2025): Ten words a day."),
    ]
    assert [(q.text, q.evidence, q.category) for q in ann.questions] == [
        ("I finished the first lesson, what next?", frozenset({"D1:1", "D2:1"}), 3),
        ("Where should I practise?", frozenset({"D4:1"}), 3),
    ]
    assert bo.questions == []


def test_another_version_of_the_data_is_refused(tmp_path: Path) -> None:
    done = _run("build", _source(tmp_path / "a", {"Ann_Lee": ANN}), "-o", tmp_path / "out.json")
    assert done.returncode == 2 and "not the 10 of AvatarMemory/RealMemBench" in done.stderr
    every = _source(tmp_path / "b", {name: BO for name in rm.SOURCE_SHA256})
    done = _run("build", every, "-o", tmp_path / "out.json")
    assert done.returncode == 2 and "hashes to" in done.stderr and rm.COMMIT in done.stderr
    done = _run("build", tmp_path / "nothing", "-o", tmp_path / "out.json")
    assert done.returncode == 2 and "holds no" in done.stderr
    assert not (tmp_path / "out.json").exists()
