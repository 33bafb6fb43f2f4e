"""The outside credential corpora's loaders read what their projects' files hold: a synthetic
checkout in each project's layout (the real ones are read at run time, never committed)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from bench.secret_detection import (
    BEARER_RULES,
    BEARER_TESTS,
    CHECKOV_SANITY,
    CREDSWEEPER_DATA,
    EARLYBIRD_RULES,
    HORUSEC_LEAKS,
    SECRETLINT_RULES,
    SEMGREP_SECRETS,
    TRIVY_SECRET,
    bearer_samples,
    checkov_samples,
    credsweeper_samples,
    earlybird_samples,
    github_patterns_samples,
    horusec_samples,
    ripsecrets_samples,
    rule_examples,
    secretlint_samples,
    semgrep_samples,
    trivy_samples,
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


_TRIVY_TEST = """
func TestSecretScanner(t *testing.T) {
    wantFindingKey := types.SecretFinding{
        RuleID:    "vendor-key",
        Severity:  "HIGH",
        StartLine: 2,
        EndLine:   2,
        Match:     "KEY=*****",
    }
    made := func(ruleID string, length int) types.SecretFinding {
        return types.SecretFinding{
            RuleID:    ruleID,
            StartLine: 1,
            EndLine:   1,
        }
    }
    wantFindingMade := made("vendor-token", 12)
    tests := []struct {
        name          string
        configPath    string
        inputFilePath string
    }{
        {
            name:          "built-in rules",
            configPath:    filepath.Join("testdata", "skip-test.yaml"),
            inputFilePath: filepath.Join("testdata", "keys.txt"),
            want: types.Secret{
                Findings: []types.SecretFinding{
                    wantFindingKey,
                    {
                        RuleID:    "vendor-block",
                        StartLine: 3,
                        EndLine:   4,
                    },
                },
            },
        },
        {
            name:          "a helper's finding",
            configPath:    filepath.Join("testdata", "skip-test.yaml"),
            inputFilePath: "testdata/token.txt",
            want: types.Secret{Findings: []types.SecretFinding{wantFindingMade}},
        },
        {
            name:          "the test's own rule, one rule disabled",
            configPath:    filepath.Join("testdata", "config-disable.yaml"),
            inputFilePath: filepath.Join("testdata", "custom.txt"),
            want: types.Secret{Findings: []types.SecretFinding{
                {
                    RuleID:    "rule1",
                    StartLine: 1,
                    EndLine:   1,
                },
            }},
        },
    }
}
"""


def test_trivy_findings_of_built_in_rules_become_positives_and_other_lines_negatives(tmp_path: Path) -> None:
    folder = tmp_path / TRIVY_SECRET
    testdata = folder / "testdata"
    testdata.mkdir(parents=True)
    (folder / "scanner_test.go").write_text(_TRIVY_TEST)
    (testdata / "skip-test.yaml").write_text("disable-allow-rules:\n  - tests\n")
    (testdata / "config-disable.yaml").write_text(
        "rules:\n  - id: rule1\n    regex: secret\ndisable-rules:\n  - vendor-key\n"
    )
    (testdata / "keys.txt").write_text("plain words\nKEY=AAA111\nBEGIN\nBBB222\n\n")
    (testdata / "token.txt").write_text("tok_CCC333\nafter\n")
    (testdata / "custom.txt").write_text("secret=DDD444\nnot a negative: rules were off\n")
    positives, negatives = trivy_samples(tmp_path)
    assert positives == [
        ("BEGIN\nBBB222", "vendor-block"),
        ("KEY=AAA111", "vendor-key"),
        ("tok_CCC333", "vendor-token"),
    ]
    assert negatives == ["after", "plain words"]


def test_credsweeper_reports_give_positives_and_what_its_model_drops_negatives(tmp_path: Path) -> None:
    samples = tmp_path / "tests" / "samples"
    samples.mkdir(parents=True)
    (samples / "keys").write_text("api_key = AAA111\nid = 1234\npassword = hunter2\n-----BEGIN\nBBB\n")

    def item(rule: str, *lines: int) -> dict[str, object]:
        return {
            "rule": rule,
            "line_data_list": [{"path": "./tests/samples/keys", "line_num": n} for n in lines],
        }

    data = tmp_path / CREDSWEEPER_DATA
    data.mkdir(parents=True)
    (data / "output.json").write_text(
        json.dumps([item("Key", 1), item("UUID", 2), item("PEM Private Key", 4, 5)])
    )
    (data / "no_ml.json").write_text(json.dumps([item("Key", 1), item("UUID", 2), item("Password", 3)]))
    positives, negatives = credsweeper_samples(tmp_path)
    assert positives == [("-----BEGIN\nBBB", "PEM Private Key"), ("api_key = AAA111", "Key")]
    assert negatives == ["password = hunter2"]  # identifiers are neither


def test_github_patterns_give_test_data_and_expected_lines_of_credential_patterns(tmp_path: Path) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "app.env").write_text("# settings\nDB_PASSWORD=AAA111\nPORT=80\n")
    start = len("# settings\nDB_PASSWORD=")
    (configs / "patterns.yml").write_text(
        yaml.safe_dump(
            {
                "name": "Configs",
                "patterns": [
                    {
                        "name": "Env passwords",
                        "type": "env_passwords",
                        "regex": {"pattern": "x"},
                        "test": {"data": "PASSWORD=BBB222\n", "start_offset": 9, "end_offset": 15},
                        "expected": [
                            {"name": "app.env", "start_offset": start, "end_offset": start + 6},
                            {"name": "absent.env", "start_offset": 0, "end_offset": 1},
                        ],
                    },
                    {
                        "name": "Bearer",
                        "type": "bearer_tokens",
                        "regex": {},
                        "test": [{"data": "Bearer CCC333"}],
                    },
                    {"name": "UUIDs", "type": "uuids", "regex": {}, "test": {"data": "id 1234"}},
                ],
            }
        )
    )
    pii = tmp_path / "pii"
    pii.mkdir()
    (pii / "patterns.yml").write_text(
        yaml.safe_dump({"name": "PII", "patterns": [{"type": "iban_de", "test": {"data": "DE00 1234"}}]})
    )
    positives, negatives = github_patterns_samples(tmp_path)
    assert positives == [
        ("Bearer CCC333", "bearer_tokens"),
        ("DB_PASSWORD=AAA111", "env_passwords"),
        ("PASSWORD=BBB222", "env_passwords"),
    ]
    assert negatives == []


def test_ripsecrets_lines_and_files_become_positives_by_family_and_none_lines_negatives(
    tmp_path: Path,
) -> None:
    lines = tmp_path / "test" / "one_per_line"
    files = tmp_path / "test" / "one_per_file"
    lines.mkdir(parents=True)
    files.mkdir()
    (lines / "vendor").write_text("vendor_AAA111\n\n  vendor_BBB222  \n")
    (lines / "other").write_text("other = CCC333\nvendor_AAA111\n")  # a repeat keeps its first family
    (files / "block").write_text("-----BEGIN KEY-----\nDDD444\n-----END KEY-----\n")
    (files / "empty").write_text("\n")
    (tmp_path / "test" / "none").write_text("plain words\n\nid = 1234\nother = CCC333\n")
    positives, negatives = ripsecrets_samples(tmp_path)
    assert positives == sorted(
        [
            ("-----BEGIN KEY-----\nDDD444\n-----END KEY-----", "block"),
            ("other = CCC333", "other"),
            ("vendor_AAA111", "other"),
            ("vendor_BBB222", "vendor"),
        ]
    )
    assert negatives == ["id = 1234", "plain words"]  # a line that is also a positive is not a negative


def test_earlybird_examples_of_credential_rules_on_bodies_become_positives_by_caption(tmp_path: Path) -> None:
    rules = tmp_path / EARLYBIRD_RULES
    rules.mkdir(parents=True)
    body = {
        "Searcharea": "body",
        "rules": [
            {"Code": 1, "Category": "password-secret", "Caption": "Password", "Example": " pw=AAA111 "},
            {"Code": 2, "Category": "key", "Caption": "Key", "Example": "key: BBB222\nmore"},
            {"Code": 3, "Category": "password-secret", "Caption": "Repeat", "Example": "pw=AAA111"},
            {"Code": 4, "Category": "password-secret", "Caption": "No example", "Example": None},
            {"Code": 5, "Category": "pii", "Caption": "Potential SSN", "Example": "123-45-6789"},
        ],
    }
    (rules / "content.yaml").write_text(yaml.safe_dump(body))
    names = {
        "Searcharea": "filename",
        "rules": [{"Code": 6, "Category": "key", "Caption": "Key file", "Example": "id_rsa"}],
    }
    (rules / "filename.yaml").write_text(yaml.safe_dump(names))
    positives, negatives = earlybird_samples(tmp_path)
    assert positives == [("key: BBB222\nmore", "Key"), ("pw=AAA111", "Password")]
    assert negatives == []


def test_checkov_sanity_sets_become_positives_by_key_and_negatives_by_entry_and_line(tmp_path: Path) -> None:
    sanity = tmp_path / CHECKOV_SANITY
    for name in ("secrets", "non_secrets", "iac_fp", "non_iac_fp"):
        (sanity / name).mkdir(parents=True)
    (sanity / "secrets" / "true_positive.json").write_text(
        json.dumps({"one": "AAA111", "two": "BBB222"}, indent=2)
    )
    (sanity / "non_secrets" / "true_negative.json").write_text(
        json.dumps({"three": "plain", "four": "AAA111"})
    )
    (sanity / "iac_fp" / "main.tf").write_text('resource "x" "y" {\n\n  name = "z"\n}\n')
    (sanity / "non_iac_fp" / "a.py").write_text("value = 1\n")
    (sanity / "other").mkdir()
    (sanity / "other" / "f.txt").write_text("left out\n")  # not a sanity folder the tests label
    positives, negatives = checkov_samples(tmp_path)
    assert positives == [('"one": "AAA111"', "one"), ('"two": "BBB222"', "two")]
    assert negatives == sorted(
        ['"four": "AAA111"', '"three": "plain"', 'name = "z"', 'resource "x" "y" {', "value = 1", "}"]
    )


def _bearer_rule(root: Path, path: str, rule_id: str, cwes: list[str], files: dict[str, str]) -> None:
    rule = root / BEARER_RULES / f"{path}.yml"
    rule.parent.mkdir(parents=True, exist_ok=True)
    rule.write_text(yaml.safe_dump({"patterns": ["x"], "metadata": {"id": rule_id, "cwe_id": cwes}}))
    testdata = root / BEARER_TESTS / path / "testdata"
    testdata.mkdir(parents=True)
    for name, text in files.items():
        (testdata / name).write_text(text)


def test_bearer_annotations_of_credential_rules_give_statements_and_other_lines_negatives(
    tmp_path: Path,
) -> None:
    bad = (
        "// bearer:expected go_lang_secret to flag expected findings\n"  # explains the annotation
        "package main\n"
        "// bearer:expected go_lang_secret\n"
        'key := "AAA111"\n'
        "\n"
        "  //   bearer:expected other_rule, go_lang_secret\n"
        "\n"
        "call(\n"
        '  "BBB222",\n'
        ")\n"
        "// bearer:expected other_rule\n"
        'other := "CCC333"\n'
        "}\n"
        "// bearer:expected go_lang_secret\n"
        'pass := "E{[(E555"\n'  # brackets in a literal open nothing
        "done()\n"
    )
    _bearer_rule(
        tmp_path, "go/lang/secret", "go_lang_secret", ["798"], {"bad.go": bad, "ok.go": "x := env()\n"}
    )
    _bearer_rule(
        tmp_path,
        "ruby/lang/pw",
        "ruby_lang_pw",
        [259],
        {"bad.rb": '# bearer:expected ruby_lang_pw\npw = "DDD444"\n'},
    )
    _bearer_rule(
        tmp_path,
        "go/lang/hash",
        "go_lang_hash",
        ["326"],
        {"bad.go": "// bearer:expected go_lang_hash\nmd5(pw)\n"},
    )
    (tmp_path / BEARER_RULES / "no_metadata.yml").write_text("patterns: []\n")
    positives, negatives = bearer_samples(tmp_path)
    assert positives == [
        ('call(\n  "BBB222",\n)', "go_lang_secret"),
        ('key := "AAA111"', "go_lang_secret"),
        ('pass := "E{[(E555"', "go_lang_secret"),
        ('pw = "DDD444"', "ruby_lang_pw"),
    ]
    assert negatives == ["done()", "package main", "x := env()", "}"]  # another rule's statement is neither


def test_horusec_samples_become_positives_by_rule_and_safe_samples_negatives(tmp_path: Path) -> None:
    folder = tmp_path / HORUSEC_LEAKS
    folder.mkdir(parents=True)
    (folder / "rules.go").write_text(
        "\n".join(
            f'\t\tMetadata: engine.Metadata{{\n\t\t\tID:            "HS-LEAKS-{n}",\n\t\t\tName:          "{name}",'
            for n, name in ((4, "Vendor Secret"), (5, "Vendor Client ID"))
        )
    )
    (folder / "samples.go").write_text(
        "package leaks\n\nconst (\n"
        "\tSampleVulnerableHSLEAKS4 = `\nkey: 'AAA111'\n`\n"
        "\tSampleSafeHSLEAKS4 = `\nkey: env('KEY')\n`\n"
        "\tSampleVulnerableHSLEAKS5 = `\nid: 'BBB222'\n`\n"
        "\tSampleSafeHSLEAKS5 = `\nid: env('ID')\n`\n"
        ")\n"
    )
    positives, negatives = horusec_samples(tmp_path)
    assert positives == [
        ("key: 'AAA111'", "HS-LEAKS-4 Vendor Secret"),
        ("id: 'BBB222'", "HS-LEAKS-5 Vendor Client ID"),
    ]
    assert negatives == ["key: env('KEY')", "id: env('ID')"]
    assert horusec_samples(tmp_path, public_ids=False) == (
        [("key: 'AAA111'", "HS-LEAKS-4 Vendor Secret")],
        ["key: env('KEY')"],
    )
