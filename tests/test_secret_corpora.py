"""The outside credential corpora's loaders read what their projects' files hold: a synthetic
checkout in secretlint's snapshot layout (the real one is read at run time, never committed)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.secret_detection import (
    SECRETLINT_RULES,
    SEMGREP_SECRETS,
    rule_examples,
    secretlint_samples,
    semgrep_samples,
)


def _snapshot(root: Path, rule: str, case: str, source: str, lines: list[tuple[int, int, str]]) -> None:
    folder = root / SECRETLINT_RULES / f"secretlint-rule-{rule}" / "test" / "snapshots" / case
    folder.mkdir(parents=True)
    messages = [
        {
            "messageId": mid,
            "range": [0, 1],
            "loc": {"start": {"line": a, "column": 0}, "end": {"line": b, "column": 1}},
        }
        for a, b, mid in lines
    ]
    (folder / "output.json").write_text(json.dumps({"messages": messages, "sourceContent": source}))


def test_secretlint_snapshots_become_positives_by_message_and_negatives_by_line(tmp_path: Path) -> None:
    key = "-----BEGIN KEY-----\nabc\n-----END KEY-----"
    _snapshot(tmp_path, "vendor", "ng.token", f"first\nTOKEN=one\n{key}\n", [(2, 2, "TOKEN"), (3, 5, "KEY")])
    _snapshot(tmp_path, "vendor", "ok.valid", "TOKEN=\n\nplain words\nTOKEN=one\n", [])
    _snapshot(
        tmp_path, "vendor", "ok.reported", "odd\n", [(1, 1, "X")]
    )  # an ok case that reports is no negative
    _snapshot(tmp_path, "no-homedir", "ng.home", "/Users/me\n", [(1, 1, "HOMEDIR")])  # not a credential
    _snapshot(tmp_path, "preset-recommend", "ng.again", "TOKEN=two\n", [(1, 1, "TOKEN")])  # a repeat
    positives, negatives = secretlint_samples(tmp_path)
    assert positives == sorted([("TOKEN=one", "vendor:TOKEN"), (key, "vendor:KEY")])
    assert negatives == ["TOKEN=", "plain words"]  # a line that is also a positive is not a negative


def test_semgrep_annotations_label_the_line_after_them(tmp_path: Path) -> None:
    folder = tmp_path / SEMGREP_SECRETS
    folder.mkdir(parents=True)
    (folder / "detected-thing.yaml").write_text("rules: []\n# ruleid: detected-thing\nnot=a test\n")
    (folder / "detected-thing.txt").write_text(
        "# ruleid: detected-thing\nthing_key = AAA111\n\n"
        "// ok: detected-thing\nthing_key = placeholder\n"
        "# todoruleid: detected-thing\nthing_key: BBB222\n"
        "# todook: detected-thing\nthing_key: ${THING}\n"
        "unlabelled line\n"
    )
    positives, negatives = semgrep_samples(tmp_path)
    assert positives == [("thing_key = AAA111", "detected-thing"), ("thing_key: BBB222", "detected-thing")]
    assert negatives == ["thing_key = placeholder", "thing_key: ${THING}"]


def test_rule_files_in_nosey_parkers_format_give_examples_and_negative_examples(tmp_path: Path) -> None:
    (tmp_path / "vendor.yml").write_text(
        "rules:\n"
        "  - id: vendor.1\n"
        "    examples: ['vendor_key = AAA111', '']\n"
        "    negative_examples: ['vendor_key = example', 'vendor_key = AAA111']\n"
        "  - id: vendor.2\n"
        "    examples: ['vendor_token: BBB222']\n"
    )
    (tmp_path / "empty.yaml").write_text("rules: []\n")
    positives, negatives = rule_examples(tmp_path)
    assert positives == [("vendor_key = AAA111", "vendor.1"), ("vendor_token: BBB222", "vendor.2")]
    assert negatives == ["vendor_key = example"]  # an example that is also a negative counts as a positive
