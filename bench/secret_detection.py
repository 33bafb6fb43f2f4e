"""Credential detection benchmark: recall per kind and false positives, for the dev corpus, the
held-out corpus and an external corpus separately, and time per call on 2,000-character texts.

Run from the repository root:
``python -m bench.secret_detection [--seed N] [--seconds S] [--trufflehog PATH] [--noseyparker PATH]
[--secretlint PATH] [--semgrep PATH] [--kingfisher PATH] [--trivy PATH] [--credsweeper PATH]
[--github-patterns PATH] [--ripsecrets PATH] [--earlybird PATH]
[--checkov PATH] [--bearer PATH] [--horusec PATH]``.
The held-out corpus (``bench/secret_corpus.py``) and the external one are reported, never tuned on:
a miss there is a figure to publish, not a rule to add.

The external corpus (``bench/secret_corpus_external.json``) is the string cases of the plugin tests
of detect-secrets (Apache-2.0; the file names the commit), labelled as those tests label them. Its
labels answer "does this plugin report this line", not "is this a credential": masks such as
``AKCxxxxxxxxxx`` count as positives there and a key one character too long as a negative,
so its figures are a floor for recall and a ceiling for false refusals. Each outside corpus is
reported twice: as labelled, and without its masks (`is_mask`: a credential written with a run of a
redacting character, ``AP6xxxxxxxxxx``, ``npm_xxxxxxxxxxx``), which this detector passes on purpose
(``docs/security.md``).

A second outside corpus stays blind: the pattern tests of TruffleHog's detectors
(``pkg/detectors/**/*_test.go``, AGPL-3.0, so never copied here). ``--trufflehog PATH`` reads them
from a checkout at run time (``git clone --depth 1 https://github.com/trufflesecurity/trufflehog``):
every test case whose ``input`` is a plain string literal, a positive when its ``want`` lists a
result, a negative when it is ``nil`` or empty. The same caveat holds: a negative there means "this
detector does not report it" (a key too far from its keyword, a near-miss of its own format).
TruffleHog's corpus chose families in the round that raised its recall, so it is no longer blind.

The rule examples of Nosey Parker (praetorian-inc/noseyparker, Apache-2.0) were the blind corpus of
the round before, run once; their misses chose the next round's families, so they are spent too.
``--noseyparker PATH`` reads a checkout at run time: every rule file under
``crates/noseyparker/data/default/builtin/rules/``, its ``examples`` as positives and its
``negative_examples`` as negatives.

The rule snapshots of secretlint (secretlint/secretlint, MIT, commit
``18346ba31b8173d52060b971221ab38c1943def0``) were the next blind corpus, run once and spent the
same way. ``--secretlint PATH`` reads a checkout at run time: under
``packages/@secretlint/secretlint-rule-*/test/snapshots/``, each ``ng.*`` snapshot's messages as
positives (the lines each message spans) and each line of an ``ok.*`` snapshot that reports nothing
as a negative; the presets' snapshots (repeats of the rules') and the rules that look for no
credential (home directories, ``.env`` file names, Kubernetes Secret manifests, comment directives,
user patterns, the example rule) are left out. Its negatives carry the same caveat: "this rule,
so configured, does not report this line".

The tests of semgrep-rules' secret rules (semgrep/semgrep-rules, commit
``157ae4706d7f54aa33647332f234dd68f30da195``, Semgrep Rules License v1.0: read at run time for
this measurement, never copied here) were the third blind corpus, run once and spent alike.
``--semgrep PATH`` reads a checkout: every test file under ``generic/secrets/security/``, the line
after each ``ruleid:`` annotation (or ``todoruleid:``) as a positive, the line after each ``ok:``
(or ``todook:``) as a negative.

The blind corpus now: the rule examples of Kingfisher (mongodb/kingfisher, Apache-2.0, commit
``ee7c0db3ef87575768f817820c24736249ffcdef``), never read while writing the rules and run once,
after all tuning. ``--kingfisher PATH`` reads a checkout: every rule file under ``data/rules/``, in
Nosey Parker's format (Kingfisher grew from its rules), its ``examples`` as positives and its
``negative_examples`` as negatives; with ``--noseyparker`` also the part of it that is not among
Nosey Parker's examples.

Two corpora were blind in round 4, never read while writing its rules: they were run on the rules
before that round and after it, and are spent now (docs/security.md has both figures):
- The secret scanner tests of Trivy (aquasecurity/trivy, Apache-2.0, commit
  ``dc3c56eed58ab21c7e08d26757c517bc946a86c5``). ``--trivy PATH`` reads a checkout's
  ``pkg/fanal/secret/``: each finding ``scanner_test.go`` expects of a built-in rule gives the lines
  it spans in its test file as a positive (labelled by the rule); the findings of the tests' own
  rules (``rule1`` and the like, declared in ``testdata/*.yaml``) are left out. The other non-blank
  lines of a file scanned with every built-in rule on are negatives: "Trivy reports nothing here".
- The test samples of CredSweeper (Samsung/CredSweeper, MIT, commit
  ``1ed2ca5cdd480667b938024464a37589b9af8564``). ``--credsweeper PATH`` reads a checkout's
  ``tests/samples/`` and ``tests/data/``: each credential its default run reports
  (``output.json``: rules, filters and its ML model) gives the sample's lines it spans as a
  positive, labelled by the rule. Its rules that name identifiers, not credentials
  (`CREDSWEEPER_IDENTIFIERS`: UUIDs, salts, nonces, bucket and domain names, app ids) are left out,
  chosen before the run. The lines its rules report without the ML model (``no_ml.json``) that the
  model then drops are negatives: "CredSweeper's model says this is no credential".

The blind corpus of round 5, never read while writing its rules and run on the rules before that
round and once after them (spent now): the
custom patterns of GitHub's secret scanning (advanced-security/secret-scanning-custom-patterns, MIT,
commit ``9b84660dfcad6cc3d0e2c40a1a5f61dd7edca4b9``). ``--github-patterns PATH`` reads a checkout:
every ``patterns.yml``, each pattern's ``test`` data as a positive and each of its ``expected``
matches in the folder's sample files as the lines the match spans, labelled by the pattern's type.
The folder of personal data (IBANs, card numbers, national ids) and the patterns that look for no
credential (`GITHUB_PATTERNS_NOT_CREDENTIALS`: UUIDs, public SSH keys, internal e-mail addresses and
URLs, IP addresses, unpinned Actions, registry typos) are left out, chosen before the run. The corpus
has no negatives.

The blind corpus of round 6: the test files of ripsecrets (sirwart/ripsecrets, MIT, commit
``416e9d04d6ba8941fc3106bf986b6c8aa875767e``), never read while writing the rules; the loader was
written from the folder's layout alone, and it was run on the rules before that round and once after
them (0.816 both times, no text read; spent now). ``--ripsecrets PATH`` reads a checkout's
``test/``: each non-empty line of a file under ``one_per_line/`` as a positive and each file under
``one_per_file/`` as one, labelled by the file's name (its family), and each non-empty line of
``none`` as a negative. It prints counts and family names only, never a text.

The blind corpus of round 7: the rule examples of EarlyBird (americanexpress/earlybird, Apache-2.0,
commit ``573753e6f39a02293d4a250878e66664aefa674a``), never read while writing the rules; the loader
was written from the rule files' layout alone, and it was run on the rules before that round and
once after them (0.196 both times, no text read; spent now). ``--earlybird PATH`` reads a checkout's
``config/rules/``: in each rule file that searches a file's body (``Searcharea: body``), the
``Example`` of each rule whose ``Category`` names a credential (`EARLYBIRD_CREDENTIALS`: ``key``,
``password-secret``) as a positive, labelled by the rule's ``Caption``. The other categories (PII,
card numbers, infrastructure, comments, weak cryptography, inclusive language) and the rules on file
names are left out, chosen before the run. The corpus has no negatives. It prints counts and
captions only, never a text.

The blind corpus of round 8: the sanity sets of checkov's secret scanner tests (bridgecrewio/checkov,
Apache-2.0, commit ``03d5fdad8d6154b1565799a7b1fb8070c158866f``), never read while writing the
rules; the loader was written from the folder's layout and the tests that name its files alone
(``tests/secrets/test_runner.py``: ``sanity/secrets`` must give 6 findings of ``CKV_SECRET_6``,
the other sanity folders none), and it prints counts and keys only, never a text. ``--checkov
PATH`` reads a checkout's ``tests/secrets/sanity/``: each entry of ``secrets/true_positive.json``
as a positive, written as its line in the JSON file (``"key": "value"``) and labelled by its key;
each entry of ``non_secrets/true_negative.json``, written alike, and each non-blank line of the
files under ``iac_fp/`` and ``non_iac_fp/`` (false refusals checkov once made, which its tests now
hold to none) as negatives. A negative there means "checkov's entropy check ``CKV_SECRET_6``
reports nothing here", which the tests ask, not "no check of checkov's reports it". The rest of
``tests/secrets/`` is left out, chosen before the run: its files are checked by counts of findings
per file or by the tests' own custom patterns, not labelled line by line.

The blind corpus of round 8's second part: the tests of Bearer's rules on hard-coded credentials
(Bearer/bearer-rules, Elastic License 2.0, so read at run time for this measurement and never copied
here; the gosec folder's files are Apache-2.0; commit ``82c335f781a61a6d8b052394f84fd1d93edec467``).
The two candidates before it in the same format held too little: DevSkim's rules on stored tokens
and keys have two ``must-match`` examples in all, and Application Inspector's rules on secrets none.
The loader was written from the folders' layout and the annotations' form alone (``tests/helper.js``:
a finding is expected where a comment ``bearer:expected <rule id>`` stands on the line before it),
and it prints counts and rule ids only, never a text. ``--bearer PATH`` reads a checkout: each rule
under ``rules/`` whose ``metadata.cwe_id`` names a hard-coded credential (`BEARER_CREDENTIAL_CWES`:
CWE-798 hard-coded credentials, CWE-259 hard-coded password; 12 rules), and the files of its test
folder (``tests/<the rule's path>/testdata/``): the statement after each annotation that names the
rule as a positive, labelled by the rule's id (its first line, and the next ones while a bracket
opened there outside a string literal is still open), and every other non-blank line of those files
as a negative. The blind run counted brackets inside literals too, which joined three Java
statements to the lines after them (56 positives, 167 negatives; 55 and 177 since). The other
rules (weak hashes and ciphers on passwords, key sizes, session keys from user input, an empty
database password) and the comments that only explain the annotation are left out, chosen before
the run. A negative there means "this rule of Bearer's expects no finding here" (code around the
findings, and what the rule does not look for: one is an RSA private key), not "no credential".

The blind corpus of round 9: the samples of Horusec's leak rules (ZupIT/horusec, Apache-2.0, commit
``873d4104a6aa89be8f86d93db8e416909d9add87``). The loader was written from the layout of
``internal/services/engines/leaks/samples.go`` (a raw string constant a sample,
``SampleVulnerableHSLEAKS<n>`` or ``SampleSafeHSLEAKS<n>``) and the ids and names of ``rules.go``
alone, and it prints counts and rule names only, never a text. ``--horusec PATH`` reads a checkout:
each vulnerable sample, whole, as a positive labelled by its rule, each safe sample as a negative;
reported once as it is and once without the three rules on OAuth client ids
(``HORUSEC_PUBLIC_IDS``), which are published, not secret: chosen before the run.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
import time
from collections import Counter
from pathlib import Path

import yaml

from memory_mcp.store.secrets import find_secret

from .secret_corpus import (
    DEFAULT_SEED,
    HELD_OUT_SEED,
    acceptable_kinds,
    held_out_negative_samples,
    held_out_positive_samples,
    negative_samples,
    positive_samples,
)

MEMORY_LIMIT = 2000
RECALL_TARGET = 0.95
FALSE_POSITIVE_TARGET = 0.01


def _texts_of_memory_size(seed: int, count: int) -> list[str]:
    """Texts of exactly 2,000 characters built from corpus sentences; one in ten ends in a secret.

    Mostly prose, as saved memories are: that is the slow path, because every rule has to run to
    the end of the text before the answer is "no secret".
    """
    rng = random.Random(seed)
    negatives = negative_samples(seed)
    positives = [text for text, _ in positive_samples(seed)]
    texts = []
    for i in range(count):
        parts: list[str] = []
        while sum(len(p) + 1 for p in parts) < MEMORY_LIMIT:
            parts.append(rng.choice(negatives))
        text = " ".join(parts)
        if i % 10 == 0:
            secret = rng.choice(positives)
            text = text[: MEMORY_LIMIT - len(secret) - 1] + " " + secret
        texts.append(text[:MEMORY_LIMIT])
    return texts


def _microseconds_per_call(texts: list[str], seconds: float) -> float:
    checks = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for text in texts:
            find_secret(text)
        checks += len(texts)
    return (time.perf_counter() - start) / checks * 1e6


def _report(name: str, positives: list[tuple[str, str]], negatives: list[str], *, verbose: bool) -> None:
    per_kind: Counter[str] = Counter()
    found: Counter[str] = Counter()
    misses: list[tuple[str, str | None, str]] = []
    for text, kind in positives:
        per_kind[kind] += 1
        match = find_secret(text)
        if match is not None and match.kind in acceptable_kinds(kind):
            found[kind] += 1
        else:
            misses.append((kind, match.kind if match else None, text))
    false_positives = [(m.kind, text) for text in negatives if (m := find_secret(text)) is not None]

    recall = sum(found.values()) / len(positives)
    fp_rate = len(false_positives) / len(negatives)
    print(f"== {name}: {len(positives)} positives of {len(per_kind)} kinds, {len(negatives)} negatives")
    print(f"recall: {recall:.4f}   (target >= {RECALL_TARGET})")
    print(f"false-positive rate: {fp_rate:.4f}   (target <= {FALSE_POSITIVE_TARGET})")
    if verbose:
        print("recall per kind:")
        for kind in sorted(per_kind):
            print(f"  {kind:28} {found[kind]:3}/{per_kind[kind]:<3} {found[kind] / per_kind[kind]:.2f}")
    print(f"misses ({len(misses)}):")
    for kind, got, text in misses:
        print(f"  expected {kind}, got {got}: {text[:120]!r}")
    print(f"false positives ({len(false_positives)}):")
    for found_kind, text in false_positives:
        print(f"  {found_kind}: {text[:120]!r}")


EXTERNAL_CORPUS = Path(__file__).with_name("secret_corpus_external.json")


def external_samples() -> tuple[list[tuple[str, str]], list[str]]:
    """The external corpus as (positives labelled by their test file, negatives)."""
    cases = json.loads(EXTERNAL_CORPUS.read_text("utf-8"))["cases"]
    positives = [(case["text"], case["source"]) for case in cases if case["flag"]]
    return positives, [case["text"] for case in cases if not case["flag"]]


# A credential written with a redacting character: eight or more of one of x, X, * or a bullet.
_MASK_RUN = re.compile(r"([xX*\u2022])\1{7,}")


def is_mask(text: str) -> bool:
    """Whether an outside corpus's positive is a mask (``AKCxxxxxxxxxx``), which this detector passes."""
    return _MASK_RUN.search(text) is not None


def _report_outside(
    title: str, positives: list[tuple[str, str]], negatives: list[str], *, list_refused: bool = False
) -> None:
    """Recall as labelled and without masks, and the share of negatives refused."""
    found = [find_secret(text) is not None for text, _ in positives]
    unmasked = [hit for hit, (text, _) in zip(found, positives, strict=True) if not is_mask(text)]
    refused = [text for text in negatives if find_secret(text) is not None]
    print(f"== {title}: {len(positives)} positives, {len(negatives)} negatives")
    print(f"recall as labelled: {sum(found) / len(positives):.4f} ({sum(found)}/{len(positives)})")
    print(
        f"recall without masks: {sum(unmasked) / len(unmasked):.4f} ({sum(unmasked)}/{len(unmasked)}; "
        f"{len(positives) - len(unmasked)} masks)"
    )
    if negatives:
        print(f"refused negatives: {len(refused) / len(negatives):.4f} ({len(refused)}/{len(negatives)})")
    if list_refused:
        for text in refused:
            match = find_secret(text)
            print(f"  {match.kind if match else None}: {text[:100]!r}")


def _report_external() -> None:
    positives, negatives = external_samples()
    _report_outside("external (detect-secrets plugin tests)", positives, negatives, list_refused=True)


# A test case of TruffleHog's pattern tests: ``input: X,`` then ``want: ...``, where X is a string
# literal, a string constant declared in the file, or ``fmt.Sprintf`` of those with ``%s``/``%v``.
_GO_LITERAL = r'(?:`[^`]*`|"(?:[^"\\\n]|\\.)*")'
_GO_CONSTANT = re.compile(rf"^\s*(\w+)\s*(?::=|=)\s*({_GO_LITERAL})\s*$", re.MULTILINE)
_GO_INPUT = re.compile(
    rf"\binput:\s*({_GO_LITERAL}|\w+|fmt\.Sprintf\(\s*{_GO_LITERAL}(?:\s*,\s*\w+)*\s*,?\s*\))\s*,"
)
_GO_WANT = re.compile(r"\bwant:\s*(nil\b|\[\]string\{\s*\}|\[\]string\{)")
_GO_VERB = re.compile(r"%[sv]")


def _go_string(literal: str) -> str | None:
    if literal.startswith("`"):
        return literal[1:-1]
    try:
        value = ast.literal_eval(literal)
    except (SyntaxError, ValueError):
        return None
    return value if isinstance(value, str) else None


def _go_input(expression: str, constants: dict[str, str]) -> str | None:
    """The string an ``input:`` expression stands for, when it is that simple; otherwise None."""
    if expression[0] in '`"':
        return _go_string(expression)
    if not expression.startswith("fmt.Sprintf("):
        return constants.get(expression)
    literal = re.match(_GO_LITERAL, expression[len("fmt.Sprintf(") :].lstrip())
    if literal is None:
        return None
    template = _go_string(literal.group())
    names = re.findall(r"\w+", expression[len("fmt.Sprintf(") + len(literal.group()) + 1 :])
    values = [constants.get(name) for name in names]
    if template is None or None in values or len(_GO_VERB.findall(template)) != len(values):
        return None
    parts = iter(values)
    return _GO_VERB.sub(lambda _: next(parts) or "", template)


def trufflehog_samples(root: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """TruffleHog's detector pattern tests under `root` as (positives labelled by detector, negatives)."""
    positives: dict[str, str] = {}
    negatives: set[str] = set()
    for path in sorted((root / "pkg" / "detectors").rglob("*_test.go")):
        if path.name.endswith("_integration_test.go"):
            continue
        source = path.read_text("utf-8", errors="replace")
        constants = {
            name: value
            for name, literal in _GO_CONSTANT.findall(source)
            if (value := _go_string(literal)) is not None
        }
        inputs = list(_GO_INPUT.finditer(source))
        for i, found in enumerate(inputs):
            text = _go_input(found.group(1), constants)
            end = inputs[i + 1].start() if i + 1 < len(inputs) else len(source)
            want = _GO_WANT.search(source, found.end(), end)
            if text is None or not text.strip() or want is None:
                continue
            if want.group(1).endswith("{"):
                positives.setdefault(text, path.parent.name)
            else:
                negatives.add(text)
    negatives -= positives.keys()
    return sorted((text, detector) for text, detector in positives.items()), sorted(negatives)


def _report_trufflehog(root: Path) -> None:
    positives, negatives = trufflehog_samples(root)
    detectors = len({detector for _, detector in positives})
    _report_outside(f"TruffleHog detector pattern tests ({detectors} detectors)", positives, negatives)


NOSEYPARKER_RULES = Path("crates/noseyparker/data/default/builtin/rules")


def noseyparker_samples(root: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """Nosey Parker's rule examples under `root` as (positives labelled by rule id, negatives)."""
    return rule_examples(root / NOSEYPARKER_RULES)


def rule_examples(folder: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """The examples of rule files in Nosey Parker's format (``rules: [{id, examples,
    negative_examples}]``) under ``folder``: (positives labelled by rule id, negatives)."""
    positives: dict[str, str] = {}
    negatives: set[str] = set()
    for path in sorted([*folder.glob("*.yml"), *folder.glob("*.yaml")]):
        for rule in yaml.safe_load(path.read_text("utf-8")).get("rules") or ():
            for text in rule.get("examples") or ():
                if isinstance(text, str) and text.strip():
                    positives.setdefault(text, str(rule.get("id", path.stem)))
            for text in rule.get("negative_examples") or ():
                if isinstance(text, str) and text.strip():
                    negatives.add(text)
    negatives -= positives.keys()
    return sorted(positives.items()), sorted(negatives)


def _report_noseyparker(root: Path) -> None:
    positives, negatives = noseyparker_samples(root)
    rules = len({rule for _, rule in positives})
    _report_outside(
        f"Nosey Parker rule examples, {rules} rules (run once blind, since tuned on)", positives, negatives
    )


SECRETLINT_RULES = Path("packages/@secretlint")
# Rules of secretlint that look for something other than a credential in a text: a home directory,
# a file's name (.env), a Kubernetes Secret manifest, comment directives, user patterns, the example.
SECRETLINT_NOT_CREDENTIALS = frozenset(
    f"secretlint-rule-{name}"
    for name in ("no-homedir", "no-dotenv", "no-k8s-kind-secret", "filter-comments", "pattern", "example")
)


def secretlint_samples(root: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """secretlint's rule snapshots under ``root``: every message of an ``ng.*`` snapshot as a positive
    (the lines it spans, labelled ``rule:messageId``), every line of an ``ok.*`` snapshot as a
    negative. The presets' snapshots repeat the rules' own and are left out."""
    positives: dict[str, str] = {}
    negatives: set[str] = set()
    for output in sorted((root / SECRETLINT_RULES).glob("secretlint-rule-*/test/snapshots/*/output.json")):
        rule = output.parents[3].name
        case = output.parent.name
        if rule in SECRETLINT_NOT_CREDENTIALS or rule.startswith("secretlint-rule-preset-"):
            continue
        snapshot = json.loads(output.read_text("utf-8"))
        lines = str(snapshot.get("sourceContent") or "").split("\n")
        if case.startswith("ng."):
            for message in snapshot.get("messages") or ():
                start, end = message["loc"]["start"]["line"], message["loc"]["end"]["line"]
                text = "\n".join(lines[start - 1 : end]).strip()
                if text:
                    kind = f"{rule.removeprefix('secretlint-rule-')}:{message.get('messageId', '')}"
                    positives.setdefault(text, kind)
        elif case.startswith("ok.") and not snapshot.get("messages"):
            negatives.update(line.strip() for line in lines if line.strip())
    negatives -= positives.keys()
    return sorted(positives.items()), sorted(negatives)


def _report_secretlint(root: Path) -> None:
    positives, negatives = secretlint_samples(root)
    _report_outside(
        f"secretlint rule snapshots, {len({k.split(':')[0] for _, k in positives})} rules (run once blind, since tuned on)",
        positives,
        negatives,
    )
    _report_by_kind(positives)


KINGFISHER_RULES = Path("data/rules")


def _report_kingfisher(root: Path, noseyparker: Path | None) -> None:
    positives, negatives = rule_examples(root / KINGFISHER_RULES)
    rules = len({rule for _, rule in positives})
    _report_outside(f"blind (Kingfisher rule examples, {rules} rules)", positives, negatives)
    if noseyparker is not None:  # Kingfisher grew from Nosey Parker's rules: the part not seen there
        seen = {text for text, _ in noseyparker_samples(noseyparker)[0]}
        fresh = [(text, rule) for text, rule in positives if text not in seen]
        _report_outside(
            f"blind (Kingfisher rule examples not among Nosey Parker's, {len({r for _, r in fresh})} rules)",
            fresh,
            [text for text in negatives if text not in seen],
        )


SEMGREP_SECRETS = Path("generic/secrets/security")
# A test annotation of semgrep-rules: a comment naming the rule that must (``ruleid``) or must not
# (``ok``) match the next line; ``todo`` ones mark what the rule gets wrong today, and the line is
# labelled by what it is.
_SEMGREP_NOTE = re.compile(r"^\s*(?:#|//|<!--|/\*|--|;)\s*(todoruleid|ruleid|todook|ok)\s*:\s*([\w.-]+)")


def semgrep_samples(root: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """semgrep-rules' secret rule tests under ``root``: the line after each ``ruleid`` annotation
    as a positive (labelled by the rule), the line after each ``ok`` one as a negative."""
    positives: dict[str, str] = {}
    negatives: set[str] = set()
    for path in sorted((root / SEMGREP_SECRETS).iterdir()):
        if path.suffix in (".yaml", ".yml") or not path.is_file():
            continue
        pending: tuple[str, str] | None = None
        for line in path.read_text("utf-8", errors="replace").splitlines():
            if note := _SEMGREP_NOTE.match(line):
                pending = (note.group(1), note.group(2))
            elif line.strip() and pending is not None:
                kind, rule = pending
                if kind.endswith("ruleid"):
                    positives.setdefault(line.strip(), rule)
                else:
                    negatives.add(line.strip())
                pending = None
    negatives -= positives.keys()
    return sorted(positives.items()), sorted(negatives)


def _report_labelled(samples: tuple[list[tuple[str, str]], list[str]], corpus: str, labels: str) -> None:
    """A corpus whose positives carry the label of the rule or family that wrote them: counts and
    label names only (its texts are not printed, so a blind corpus stays blind)."""
    positives, negatives = samples
    count = len({label for _, label in positives})
    _report_outside(f"blind ({corpus}, {count} {labels})", positives, negatives)
    _report_by_kind(positives)


def _report_by_kind(positives: list[tuple[str, str]]) -> None:
    per_kind: Counter[str] = Counter(kind for _, kind in positives)
    found: Counter[str] = Counter(kind for text, kind in positives if find_secret(text) is not None)
    for kind in sorted(per_kind):
        print(f"  {kind:50} {found[kind]:3}/{per_kind[kind]}")


def _report_semgrep(root: Path) -> None:
    positives, negatives = semgrep_samples(root)
    rules = len({rule for _, rule in positives})
    _report_outside(
        f"semgrep-rules secret rule tests, {rules} rules (run once blind, since tuned on)",
        positives,
        negatives,
    )
    _report_by_kind(positives)


TRIVY_SECRET = Path("pkg/fanal/secret")
# A finding ``scanner_test.go`` declares or writes inline: its rule, then its first and last line.
_TRIVY_FINDING = re.compile(r'RuleID:\s*"([^"]+)".*?StartLine:\s*(\d+),\s*EndLine:\s*(\d+)', re.DOTALL)
_TRIVY_NAMED = re.compile(r"(\w+)\s*:=\s*types\.SecretFinding\{")
_TRIVY_MADE = re.compile(r'(\w+)\s*:=\s*(\w+)\("([^"]+)"')
_TRIVY_INPUT = re.compile(
    r'inputFilePath:\s*(?:filepath\.Join\("testdata",\s*"([^"]+)"\)|"testdata/([^"]+)")'
)
_TRIVY_CONFIG = re.compile(r'configPath:\s*filepath\.Join\("testdata",\s*"([^"]+)"\)')
# The test configurations that leave every built-in rule on (and no allow rule of their own).
_TRIVY_ALL_RULES = {"config.yaml", "skip-test.yaml"}


def _trivy_custom_rules(testdata: Path) -> set[str]:
    rules: set[str] = set()
    for path in testdata.glob("*.yaml"):
        config = yaml.safe_load(path.read_text("utf-8")) or {}
        rules.update(rule["id"] for rule in config.get("rules") or [] if isinstance(rule, dict))
    return rules


def trivy_samples(root: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """Trivy's secret scanner tests under ``root``: the lines each expected finding of a built-in
    rule spans as a positive (labelled by the rule), the other lines of its test files as negatives."""
    folder = root / TRIVY_SECRET
    testdata = folder / "testdata"
    custom = _trivy_custom_rules(testdata)
    source = (folder / "scanner_test.go").read_text("utf-8")
    named: dict[str, tuple[str, int, int]] = {}
    for declared in _TRIVY_NAMED.finditer(source):
        finding = _TRIVY_FINDING.search(source, declared.end())
        if finding is not None:
            named[declared.group(1)] = (finding.group(1), int(finding.group(2)), int(finding.group(3)))
    for made in _TRIVY_MADE.finditer(source):  # a finding a helper makes: the helper's lines
        helper = re.search(
            rf"{made.group(2)}\s*:=\s*func\(.*?StartLine:\s*(\d+),\s*EndLine:\s*(\d+)", source, re.DOTALL
        )
        if helper is not None:
            named[made.group(1)] = (made.group(3), int(helper.group(1)), int(helper.group(2)))
    positives: dict[str, str] = {}
    negatives: set[str] = set()
    inputs = list(_TRIVY_INPUT.finditer(source))
    for i, found in enumerate(inputs):
        case_start = source.rfind("name:", 0, found.start())
        case_end = inputs[i + 1].start() if i + 1 < len(inputs) else len(source)
        case_end = source.rfind("name:", found.end(), case_end) if i + 1 < len(inputs) else case_end
        case = source[case_start:case_end]
        path = testdata / (found.group(1) or found.group(2))
        if not path.is_file():
            continue
        lines = path.read_text("utf-8", errors="replace").splitlines()
        findings = [(m.group(1), int(m.group(2)), int(m.group(3))) for m in _TRIVY_FINDING.finditer(case)]
        findings += [named[name] for name in re.findall(r"\b\w+\b", case) if name in named]
        covered: set[int] = set()
        for rule, first, last in findings:
            covered.update(range(first, last + 1))
            text = "\n".join(lines[first - 1 : last]).strip()
            if rule not in custom and text:
                positives.setdefault(text, rule)
        config = _TRIVY_CONFIG.search(case)
        if config is not None and config.group(1) in _TRIVY_ALL_RULES and path.suffix != ".md":
            negatives.update(
                line.strip() for n, line in enumerate(lines, 1) if n not in covered and line.strip()
            )
    negatives -= positives.keys()
    return sorted(positives.items()), sorted(negatives)


CREDSWEEPER_DATA = Path("tests/data")
# CredSweeper rules that report identifiers, not credentials; left out before the corpus was run.
CREDSWEEPER_IDENTIFIERS = frozenset(
    {"UUID", "Salt", "Nonce", "AWS S3 Bucket", "Firebase Domain", "Tencent WeChat API App ID"}
)


def _credsweeper_items(root: Path, report: str) -> dict[tuple[str, int, int], str]:
    """Each credential of one of CredSweeper's expected reports: (sample, first line, last line) -> rule."""
    items: dict[tuple[str, int, int], str] = {}
    for item in json.loads((root / CREDSWEEPER_DATA / report).read_text("utf-8")):
        if item["rule"] in CREDSWEEPER_IDENTIFIERS:
            continue
        spans = item["line_data_list"]
        numbers = [int(span["line_num"]) for span in spans]
        items.setdefault((spans[0]["path"], min(numbers), max(numbers)), item["rule"])
    return items


def credsweeper_samples(root: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """CredSweeper's samples under ``root``: what its default run reports as positives (labelled by
    rule), what its rules report but its model drops as negatives."""

    def text(sample: str, first: int, last: int) -> str:
        path = root / sample
        if first < 1 or not path.is_file():
            return ""
        lines = path.read_text("utf-8", errors="replace").splitlines()
        return "\n".join(lines[first - 1 : last]).strip()

    reported = _credsweeper_items(root, "output.json")
    positives: dict[str, str] = {}
    for (sample, first, last), rule in reported.items():
        if found := text(sample, first, last):
            positives.setdefault(found, rule)
    dropped = {
        found
        for key in _credsweeper_items(root, "no_ml.json").keys() - reported.keys()
        if (found := text(*key))
    }
    return sorted(positives.items()), sorted(dropped - positives.keys())


# The patterns of GitHub's custom pattern collection that look for no credential; left out, with
# the folder of personal data, before the corpus was run.
GITHUB_PATTERNS_NOT_CREDENTIALS = frozenset(
    {
        "uuids",
        "ssh_public_key",
        "hardcoded_internal_emails",
        "hardcoded_internal_urls",
        "any_ipv4_addresses",
        "github_actions_sha_checker",
        "ghcr_typos",
    }
)
GITHUB_PATTERNS_PERSONAL_DATA = "pii"


def _lines_spanning(text: str, start: int, end: int) -> str:
    """The whole lines of ``text`` that characters ``start`` to ``end`` touch."""
    first = text.rfind("\n", 0, start) + 1
    last = text.find("\n", max(start, end - 1))
    return text[first : len(text) if last < 0 else last].strip()


def github_patterns_samples(root: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """GitHub's custom secret patterns under ``root``: each credential pattern's test data and
    expected matches as positives, labelled by the pattern's type; no negatives."""
    positives: dict[str, str] = {}
    for path in sorted(root.rglob("patterns.yml")):
        if GITHUB_PATTERNS_PERSONAL_DATA in path.relative_to(root).parts:
            continue
        for pattern in yaml.safe_load(path.read_text("utf-8")).get("patterns") or ():
            kind = str(pattern.get("type", ""))
            if kind in GITHUB_PATTERNS_NOT_CREDENTIALS:
                continue
            tests = pattern.get("test") or []
            for test in tests if isinstance(tests, list) else [tests]:
                if isinstance(test, dict) and isinstance(data := test.get("data"), str) and data.strip():
                    positives.setdefault(data.strip(), kind)
            for match in pattern.get("expected") or ():
                sample = path.parent / str(match.get("name", ""))
                if not sample.is_file():
                    continue
                content = sample.read_text("utf-8", errors="replace")
                found = _lines_spanning(content, int(match["start_offset"]), int(match["end_offset"]))
                if found:
                    positives.setdefault(found, kind)
    return sorted(positives.items()), []


RIPSECRETS_TEST = Path("test")


def ripsecrets_samples(root: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """ripsecrets' test files under ``root``: each line of ``test/one_per_line/<family>`` and each
    file of ``test/one_per_file/`` as a positive labelled by its family (the file's name), each line
    of ``test/none`` as a negative."""
    folder = root / RIPSECRETS_TEST

    def read(path: Path) -> str:
        return path.read_text("utf-8", errors="replace")

    positives: dict[str, str] = {}
    for path in sorted((folder / "one_per_line").iterdir()):
        if path.is_file():
            for line in read(path).splitlines():
                if line.strip():
                    positives.setdefault(line.strip(), path.name)
    for path in sorted((folder / "one_per_file").iterdir()):
        if path.is_file() and read(path).strip():
            positives.setdefault(read(path).strip(), path.name)
    none = folder / "none"
    negatives = (
        {line.strip() for line in read(none).splitlines() if line.strip()} if none.is_file() else set()
    )
    return sorted(positives.items()), sorted(negatives - positives.keys())


EARLYBIRD_RULES = Path("config/rules")
# EarlyBird's rule categories that look for a credential; the others (pii, cc-number,
# infrastructure, comment, insecure-crypto, inclusivity, sensitive-file) were left out before the run.
EARLYBIRD_CREDENTIALS = frozenset({"key", "password-secret"})


def earlybird_samples(root: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """EarlyBird's rule examples under ``root``: the ``Example`` of each rule of a credential
    category in a rule file on files' bodies, labelled by the rule's caption; no negatives."""
    positives: dict[str, str] = {}
    for path in sorted((root / EARLYBIRD_RULES).glob("*.yaml")):
        config = yaml.safe_load(path.read_text("utf-8")) or {}
        if str(config.get("Searcharea", "")).lower() != "body":
            continue
        for rule in config.get("rules") or ():
            example = rule.get("Example")
            if rule.get("Category") in EARLYBIRD_CREDENTIALS and isinstance(example, str) and example.strip():
                positives.setdefault(example.strip(), str(rule.get("Caption", path.stem)))
    return sorted(positives.items()), []


CHECKOV_SANITY = Path("tests/secrets/sanity")
# The sanity folders of checkov's secret tests whose files it must not report (false refusals it
# once made); every non-blank line of their files is a negative.
CHECKOV_NO_FINDINGS = ("iac_fp", "non_iac_fp")


def _json_entries(path: Path) -> list[tuple[str, str]]:
    """Each entry of a JSON object file as its line in the file (``"key": "value"``), with its key."""
    if not path.is_file():
        return []
    entries = json.loads(path.read_text("utf-8"))
    return [(json.dumps({key: value})[1:-1], str(key)) for key, value in entries.items()]


def checkov_samples(root: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """checkov's secret sanity sets under ``root``: each entry of ``secrets/true_positive.json`` as a
    positive labelled by its key; each entry of ``non_secrets/true_negative.json`` and each line of
    the files under ``iac_fp/`` and ``non_iac_fp/`` as negatives."""
    folder = root / CHECKOV_SANITY
    positives: dict[str, str] = {}
    for text, key in _json_entries(folder / "secrets" / "true_positive.json"):
        positives.setdefault(text, key)
    negatives = {text for text, _ in _json_entries(folder / "non_secrets" / "true_negative.json")}
    for name in CHECKOV_NO_FINDINGS:
        for path in sorted((folder / name).rglob("*")):
            if path.is_file():
                lines = path.read_text("utf-8", errors="replace").splitlines()
                negatives.update(line.strip() for line in lines if line.strip())
    return sorted(positives.items()), sorted(negatives - positives.keys())


BEARER_RULES = Path("rules")
BEARER_TESTS = Path("tests")
# The weaknesses (CWE ids in a rule's metadata) that name a hard-coded credential: Bearer's rules
# with one of them are read, the others left out before the run.
BEARER_CREDENTIAL_CWES = frozenset({"798", "259"})
# A test file's annotation, a comment line of its own: the statement after it is a finding of the
# rules it names (comma-separated).
_BEARER_EXPECTED = re.compile(
    r"^\s*(?://|#|/\*|<!--)\s*bearer:expected\s+([\w-]+(?:\s*,\s*[\w-]+)*)\s*(?:\*/|-->)?\s*$"
)


def _bearer_rules(root: Path) -> list[tuple[str, Path]]:
    """Each rule on a hard-coded credential: (its id, its test data folder)."""
    rules = []
    for path in sorted((root / BEARER_RULES).rglob("*.yml")):
        rule = yaml.safe_load(path.read_text("utf-8"))
        metadata = rule.get("metadata") if isinstance(rule, dict) else None
        if not isinstance(metadata, dict):
            continue
        cwes = metadata.get("cwe_id") or ()
        if {str(cwe) for cwe in ([cwes] if isinstance(cwes, str | int) else cwes)} & BEARER_CREDENTIAL_CWES:
            folder = root / BEARER_TESTS / path.relative_to(root / BEARER_RULES).with_suffix("") / "testdata"
            rules.append((str(metadata.get("id", path.stem)), folder))
    return rules


# A string literal on one line, whose brackets open or close nothing.
_STRING_LITERAL = re.compile(r""""(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'""")


def _statement_end(lines: list[str], start: int) -> int:
    """The last line of the statement that starts on ``lines[start]``: while a bracket is open
    (outside string literals)."""
    depth, end = 0, start
    while end < len(lines):
        line = _STRING_LITERAL.sub("", lines[end])
        depth += sum(line.count(c) for c in "([{") - sum(line.count(c) for c in ")]}")
        if depth <= 0:
            break
        end += 1
    return min(end, len(lines) - 1)


def bearer_samples(root: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """The tests of Bearer's rules on hard-coded credentials under ``root``: each statement after a
    ``bearer:expected`` annotation naming the rule as a positive labelled by the rule's id, every
    other non-blank line of the rule's test files as a negative."""
    positives: dict[str, str] = {}
    negatives: set[str] = set()
    for rule, folder in _bearer_rules(root):
        for path in sorted(folder.rglob("*")) if folder.is_dir() else ():
            if not path.is_file():
                continue
            lines = path.read_text("utf-8", errors="replace").splitlines()
            taken: set[int] = set()
            for n, line in enumerate(lines):
                note = _BEARER_EXPECTED.match(line)
                if note is None:
                    continue
                taken.add(n)
                start = n + 1
                while start < len(lines) and (
                    not lines[start].strip() or _BEARER_EXPECTED.match(lines[start])
                ):
                    start += 1
                if start >= len(lines):
                    continue
                end = _statement_end(lines, start)
                taken.update(range(start, end + 1))
                if rule in {name.strip() for name in note.group(1).split(",")}:
                    text = "\n".join(lines[start : end + 1]).strip()
                    positives.setdefault(text, rule)
            negatives.update(
                line.strip()
                for n, line in enumerate(lines)
                if n not in taken and line.strip() and "bearer:" not in line
            )
    return sorted(positives.items()), sorted(negatives - positives.keys())


HORUSEC_LEAKS = Path("internal/services/engines/leaks")
# ``samples.go``: one raw string constant a sample, ``SampleVulnerableHSLEAKS<n>`` (a finding of the
# rule ``HS-LEAKS-<n>``) or ``SampleSafeHSLEAKS<n>`` (none); ``rules.go`` names each rule.
_HORUSEC_SAMPLE = re.compile(r"^\s*Sample(Vulnerable|Safe)HSLEAKS(\d+)\s*=\s*`([^`]*)`", re.MULTILINE)
_HORUSEC_RULE = re.compile(r'ID:\s*"HS-LEAKS-(\d+)",\s*Name:\s*"([^"]+)"')
# Rules whose finding is an OAuth client's id, which its owner publishes (in a login page's URL),
# not a credential: counted apart, chosen before the run.
HORUSEC_PUBLIC_IDS = frozenset({"5", "7", "9"})


def horusec_samples(root: Path, public_ids: bool = True) -> tuple[list[tuple[str, str]], list[str]]:
    """The samples of Horusec's leak rules under ``root``: each vulnerable sample, whole, as a
    positive labelled by its rule's id and name, each safe sample as a negative; without
    ``public_ids``, the rules of :data:`HORUSEC_PUBLIC_IDS` left out of both."""
    folder = root / HORUSEC_LEAKS
    names = dict(_HORUSEC_RULE.findall((folder / "rules.go").read_text("utf-8")))
    positives: list[tuple[str, str]] = []
    negatives: list[str] = []
    for kind, number, text in _HORUSEC_SAMPLE.findall((folder / "samples.go").read_text("utf-8")):
        if not public_ids and number in HORUSEC_PUBLIC_IDS:
            continue
        if kind == "Vulnerable":
            positives.append((text.strip(), f"HS-LEAKS-{number} {names.get(number, '?')}"))
        else:
            negatives.append(text.strip())
    return positives, negatives


REPOSITORY = Path(__file__).resolve().parent.parent


def docs_paragraphs() -> list[tuple[str, str]]:
    """The paragraphs of this project's documentation (``docs/*.md`` and the READMEs): ordinary
    texts about credentials, written before the rules were read against them."""
    paths = sorted((REPOSITORY / "docs").rglob("*.md")) + sorted(REPOSITORY.glob("*/README.md"))
    paths.insert(0, REPOSITORY / "README.md")
    return [
        (str(path.relative_to(REPOSITORY)), paragraph)
        for path in paths
        if path.is_file()
        for paragraph in re.split(r"\n\s*\n", path.read_text("utf-8"))
        if paragraph.strip()
    ]


def _report_docs() -> None:
    paragraphs = docs_paragraphs()
    refused = [(path, text, m) for path, text in paragraphs if (m := find_secret(text)) is not None]
    print(f"== this project's docs: {len(paragraphs)} paragraphs, {len(refused)} refused")
    for path, text, match in refused:
        print(f"  {match.kind} in {path}: {text[:100]!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--seconds", type=float, default=3.0, help="time spent measuring speed")
    parser.add_argument(
        "--trufflehog",
        type=Path,
        metavar="PATH",
        help="a checkout of trufflesecurity/trufflehog",
    )
    parser.add_argument(
        "--noseyparker",
        type=Path,
        metavar="PATH",
        help="a checkout of praetorian-inc/noseyparker (blind corpus: run once, never tuned on)",
    )
    parser.add_argument(
        "--secretlint",
        type=Path,
        metavar="PATH",
        help="a checkout of secretlint/secretlint (blind corpus: run once, never tuned on)",
    )
    parser.add_argument(
        "--semgrep",
        type=Path,
        metavar="PATH",
        help="a checkout of semgrep/semgrep-rules (blind corpus: run once, never tuned on)",
    )
    parser.add_argument(
        "--kingfisher",
        type=Path,
        metavar="PATH",
        help="a checkout of mongodb/kingfisher (blind corpus: run once, never tuned on)",
    )
    parser.add_argument(
        "--trivy",
        type=Path,
        metavar="PATH",
        help="a checkout of aquasecurity/trivy (blind corpus: run once, never tuned on)",
    )
    parser.add_argument(
        "--credsweeper",
        type=Path,
        metavar="PATH",
        help="a checkout of Samsung/CredSweeper (blind corpus: run once, never tuned on)",
    )
    parser.add_argument(
        "--github-patterns",
        type=Path,
        metavar="PATH",
        help="a checkout of advanced-security/secret-scanning-custom-patterns (blind corpus: run once)",
    )
    parser.add_argument(
        "--ripsecrets",
        type=Path,
        metavar="PATH",
        help="a checkout of sirwart/ripsecrets (blind corpus: counts only, run once before and once after)",
    )
    parser.add_argument(
        "--earlybird",
        type=Path,
        metavar="PATH",
        help="a checkout of americanexpress/earlybird (blind corpus: counts only, run once before and once after)",
    )
    parser.add_argument(
        "--checkov",
        type=Path,
        metavar="PATH",
        help="a checkout of bridgecrewio/checkov (blind corpus: counts only, run once before and once after)",
    )
    parser.add_argument(
        "--bearer",
        type=Path,
        metavar="PATH",
        help="a checkout of Bearer/bearer-rules (blind corpus: counts only, run once before and once after)",
    )
    parser.add_argument(
        "--horusec",
        type=Path,
        metavar="PATH",
        help="a checkout of ZupIT/horusec (blind corpus: counts only, run once before and once after)",
    )
    args = parser.parse_args()

    _report("dev", positive_samples(args.seed), negative_samples(args.seed), verbose=True)
    _report(
        "held out",
        held_out_positive_samples(HELD_OUT_SEED),
        held_out_negative_samples(HELD_OUT_SEED),
        verbose=False,
    )
    _report_docs()
    _report_external()
    if args.trufflehog is not None:
        _report_trufflehog(args.trufflehog)
    if args.noseyparker is not None:
        _report_noseyparker(args.noseyparker)
    if args.secretlint is not None:
        _report_secretlint(args.secretlint)
    if args.semgrep is not None:
        _report_semgrep(args.semgrep)
    if args.kingfisher is not None:
        _report_kingfisher(args.kingfisher, args.noseyparker)
    if args.trivy is not None:
        _report_labelled(trivy_samples(args.trivy), "Trivy secret scanner tests", "built-in rules")
    if args.credsweeper is not None:
        _report_labelled(credsweeper_samples(args.credsweeper), "CredSweeper test samples", "rules")
    if args.github_patterns is not None:
        _report_labelled(
            github_patterns_samples(args.github_patterns), "GitHub custom secret patterns", "patterns"
        )
    if args.ripsecrets is not None:
        _report_labelled(ripsecrets_samples(args.ripsecrets), "ripsecrets test files", "families")
    if args.earlybird is not None:
        _report_labelled(earlybird_samples(args.earlybird), "EarlyBird rule examples", "captions")
    if args.checkov is not None:
        _report_labelled(checkov_samples(args.checkov), "checkov secret sanity sets", "keys")
    if args.bearer is not None:
        _report_labelled(
            bearer_samples(args.bearer), "Bearer's tests of its hard-coded credential rules", "rules"
        )
    if args.horusec is not None:
        _report_labelled(horusec_samples(args.horusec), "Horusec leak rule samples", "rules")
        _report_labelled(
            horusec_samples(args.horusec, public_ids=False),
            "Horusec leak rule samples, less the rules on public client ids",
            "rules",
        )
    texts = _texts_of_memory_size(args.seed, 200)
    micros = _microseconds_per_call(texts, args.seconds)
    print(f"speed: {micros:.0f} µs per call on {MEMORY_LIMIT}-character texts ({1e6 / micros:,.0f} calls/s)")


if __name__ == "__main__":
    main()
