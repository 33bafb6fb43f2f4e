"""The PrefEval held-out set's converter: a synthetic source in PrefEval's shape becomes what
``bench.locomo`` loads, with the evidence on the message that holds the preference.

PrefEval's data is not in the repository (CC BY-NC 4.0), so these runs pass ``--any-version``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench import heldout_prefeval as pe
from bench.locomo import load_locomo

ROOT = Path(__file__).resolve().parents[1]


def _entry(topic: int, k: int, paraphrased: bool) -> dict[str, object]:
    preference = f"I strongly dislike crowded beaches in topic{topic} number{k}."
    slip = "I keep away from busy seaside places." if paraphrased else f"Also, {preference.lower()}"
    return {
        "preference": preference,
        "question": f"Where should I travel next, topic {topic}?",
        "persona": "A retired teacher",
        "conversation": {
            "0": {"user": "Hello, I need help planning a trip.", "assistant": "Happy to help."},
            "1": {"user": f"I like quiet towns. {slip}", "assistant": "Noted."},
            "2": {"user": "Any tips on packing?", "assistant": "Pack light."},
        },
    }


def _source(tmp_path: Path, users: int = 2) -> Path:
    folder = tmp_path / pe.PERSONA_DIR
    folder.mkdir(parents=True)
    for t in range(pe.TOPICS):
        entries = [_entry(t, k, paraphrased=(t == 0 and k == 1)) for k in range(users + (t % 2))]
        (folder / f"topic_{t:02d}.json").write_text(json.dumps(entries))
    return tmp_path


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.heldout_prefeval", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


def test_every_user_holds_one_conversation_of_every_topic_and_the_evidence_is_the_slip(
    tmp_path: Path,
) -> None:
    out = tmp_path / "pe.json"
    done = _run("build", _source(tmp_path), "-o", out, "--any-version")
    assert done.returncode == 0, done.stderr
    # Users: as many as the smallest topic has conversations; one paraphrased slip is left out.
    assert "2 users, 40 sessions, 240 turns, 39 questions (1 left out" in done.stdout
    conversations = load_locomo(out)
    assert [c.sample_id for c in conversations] == ["pe-0", "pe-1"]
    for c in conversations:
        texts = {t.dia_id: t.text for t in c.turns}
        assert len({t.session for t in c.turns}) == pe.TOPICS
        for q in c.questions:
            (evidence,) = q.evidence
            assert evidence.endswith(":3")  # the user's second message: turns 1-2 are the first exchange
            assert "crowded beaches" in texts[evidence] and texts[evidence].startswith("User (")
    # Sessions are rotated per user, so a topic is not always at the same place in a history.
    raw = json.loads(out.read_text())
    firsts = [s["conversation"]["session_1"][2]["text"] for s in raw]
    assert "topic0 " in firsts[0] and "topic1 " in firsts[1]


def test_another_version_of_the_source_is_refused(tmp_path: Path) -> None:
    done = _run("build", _source(tmp_path), "-o", tmp_path / "pe.json")
    assert done.returncode == 2
    assert "another version would put the evidence on other turns" in done.stderr
    assert not (tmp_path / "pe.json").exists()


def test_no_message_with_half_the_words_means_no_evidence() -> None:
    messages = ["I like quiet towns.", "Crowded beaches are fine, I dislike nothing."]
    assert pe.evidence_turn("I strongly dislike crowded beaches.", messages) == 1
    assert pe.evidence_turn("I strongly dislike crowded beaches.", ["Quiet towns please."]) is None
    assert pe.evidence_turn("I am.", messages) is None  # no content word to look for


def test_a_turn_longer_than_a_memory_is_cut_at_a_sentence_end() -> None:
    sentence = "The assistant explains one more thing at length here. "
    long = sentence * (pe.MAX_TURN // len(sentence) + 3)
    cut = pe.fit(long)
    assert len(cut) <= pe.MAX_TURN and cut.endswith("here.") and long.startswith(cut)
    assert pe.fit("Short. Kept whole.") == "Short. Kept whole."
