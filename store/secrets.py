"""Credential detection for memory content: `find_secret` says whether a text looks like it holds a secret.

Memories are shared with everyone in a space and end up in prompts, so a write whose content looks
like a credential is refused and the refusal names the kind found (see `SECRET_KINDS`). Detection is
a fixed list of rules tried in order, most specific first; the first rule that matches wins, so a
GitHub token assigned to ``GITHUB_TOKEN=`` is reported as a GitHub token, not as a generic assignment.

Rules
-----
1. **Vendor formats** with a recognisable prefix or shape: Google Cloud service-account JSON
   (``private_key_id`` or an inline ``private_key``), AWS access key ids (``AKIA``/``ASIA`` + 16),
   AWS secret keys (40 base64 characters introduced by an AWS secret-key name), Azure storage account
   keys, connection strings and SAS signatures, GitHub (``ghp_ gho_ ghs_ ghu_ ghr_ github_pat_``),
   GitLab (``glpat-`` and friends), Slack tokens (``xoxb-`` ...) and webhook URLs, Stripe
   (``sk_live_``, ``rk_live_``, ``sk_test_``, ``whsec_``), Anthropic (``sk-ant-``), OpenAI (``sk-``,
   ``sk-proj-``), Google API keys (``AIza``), SendGrid (``SG.x.y``), Twilio (``SK`` + 32 hex, or 32 hex
   next to the word Twilio), npm (``npm_``), Hugging Face (``hf_``).
2. **Structural formats**: JWTs (three base64url segments whose header decodes to a JSON object with
   ``alg``), PEM private-key blocks (a ``BEGIN ... PRIVATE KEY`` line followed by key material),
   URLs with a password in the user-info part (``postgres://user:pw@host``, ``redis://:pw@host``),
   ``Authorization: Basic <base64 user:password>``, ``curl -u user:password`` and
   ``Bearer <token>``.
3. **Assignments**: a credential-like name (``password``, ``passwd``, ``pwd``, ``passphrase``,
   ``Passwort``, ``Kennwort``, ``secret``, ``token``, ``api_key``, ``client_secret``, ...) at the end of
   a key, followed by ``=``, ``:=``, ``=>`` or ``:`` and a value; and the prose form
   "the password is X" / "das Passwort ist X" / "la password è X".
4. **Generic high entropy**: a random-looking string of 20+ characters within a few words of
   ``key``, ``secret``, ``token``, ``password``, ``credential`` (and German/Italian equivalents) on
   the same line.

What does *not* count as a secret (so that notes *about* credentials can be saved):

- **Placeholders and references**: values in angle brackets or templates (``<password>``,
  ``${DB_PASSWORD}``, ``{{ secrets.token }}``, ``%(pw)s``), masked values (``***``, ``xxxx``, ``...``),
  values containing marker words (``example``, ``your``, ``changeme``, ``redacted``, ``dummy``,
  ``placeholder``, ``sample``, or the words password/secret/token themselves, as in ``my-secret-token``),
  environment-variable names (``DB_PASSWORD``), dotted names and calls (``settings.db_password``,
  ``os.getenv(...)``), file paths and URLs.
- **Well-known defaults** (``admin``, ``root``, ``guest``, ``postgres``, ``test``, ``changeme``,
  ``password``, ``secret``, ...): they are public knowledge, and runbook notes such as "the local
  compose file uses postgres:postgres" are worth keeping. AWS's documentation key id (which ends in
  ``EXAMPLE``) is a placeholder by the same rule.
- **Bare identifiers**: git SHAs, hashes and digests (pure hex), UUIDs, ticket ids, version strings,
  error codes and colour codes are never flagged on their own, even next to the word "key"; hex
  values are flagged only when assigned to a credential name (``token=<40 hex>``) or next to the
  word Twilio.
- **Prose after a colon**: with an unquoted ``token: value`` (YAML, or an English sentence), the value
  must look like a credential rather than a word: 8+ characters with a lowercase letter, a digit and
  a third class of character, and not a hyphenated word such as ``OAuth2-compatible``; or a long
  random string. Quoted values containing spaces are treated as prose (``{"password": "too short"}``),
  so passphrases with spaces are not detected.

"Looks random" combines three measures, set by sampling random base62/base64 strings against
identifiers and paths that appear in notes: Shannon entropy of at least 3.5 bits per character
(random 20-character base62 strings fall below that about once in a thousand; words and repeated
characters fall well below it); a mean camelCase/digit-run token length of at most 3 (random
mixed-case strings change character class every two characters or so, identifiers like
``getUserTokenV2Handler`` every three or four); and an unbroken letter-digit run of 16+ characters,
which rules out paths and file names with separators.

Names (``Password``, ``API_KEY``) match in any case; vendor prefixes match as the vendors write them.
Character classes (lowercase, uppercase, digit, symbol) are ASCII; other letters count as symbols.

The module is standard library only and precompiles every pattern; it runs on every save. Each rule
names substrings the text must contain before its pattern runs, so a text that does not mention
credentials costs little more than one pass per vendor prefix (``bench/secret_detection.py``).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import string
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class SecretKind:
    """A kind of credential: a stable machine name and the words used in a refusal."""

    kind: str
    label: str


@dataclass(frozen=True)
class SecretMatch:
    """What `find_secret` found: the kind of credential and a human label ("an AWS access key ID")."""

    kind: str
    label: str


SECRET_KINDS: tuple[SecretKind, ...] = (
    SecretKind("aws_access_key", "an AWS access key ID"),
    SecretKind("aws_secret_key", "an AWS secret access key"),
    SecretKind("gcp_service_account", "a Google Cloud service-account key"),
    SecretKind("azure_storage_key", "an Azure storage account key or connection string"),
    SecretKind("azure_sas_token", "an Azure shared access signature"),
    SecretKind("github_token", "a GitHub token"),
    SecretKind("gitlab_token", "a GitLab token"),
    SecretKind("slack_token", "a Slack token"),
    SecretKind("slack_webhook", "a Slack webhook URL"),
    SecretKind("stripe_key", "a Stripe secret key"),
    SecretKind("anthropic_api_key", "an Anthropic API key"),
    SecretKind("openai_api_key", "an OpenAI API key"),
    SecretKind("google_api_key", "a Google API key"),
    SecretKind("sendgrid_api_key", "a SendGrid API key"),
    SecretKind("twilio_key", "a Twilio API key or auth token"),
    SecretKind("npm_token", "an npm access token"),
    SecretKind("huggingface_token", "a Hugging Face access token"),
    SecretKind("jwt", "a JSON Web Token"),
    SecretKind("private_key", "a private key"),
    SecretKind("connection_string_password", "a connection string with an embedded password"),
    SecretKind("basic_auth", "HTTP basic-auth credentials"),
    SecretKind("bearer_token", "a bearer token"),
    SecretKind("password_assignment", "a password"),
    SecretKind("secret_assignment", "a secret, token or API key value"),
    SecretKind("generic_high_entropy", "a random-looking secret next to a word like key, secret or token"),
)

_LABELS: dict[str, str] = {k.kind: k.label for k in SECRET_KINDS}

# ---------------------------------------------------------------------------------------------
# Value checks shared by the rules
# ---------------------------------------------------------------------------------------------

# Substrings that mark a value as a stand-in rather than a real credential. They are matched in
# lower, upper and capitalised form only (``your``, ``YOUR``, ``Your``): matching in any case would make
# about one random 40-character key in 5,000 contain "yOuR" or "xXXx" and slip through.
_PLACEHOLDER_MARKERS = (
    "example",
    "placeholder",
    "changeme",
    "changeMe",
    "change_me",
    "change-me",
    "your",
    "redacted",
    "dummy",
    "sample",
    "xxxx",
    "****",
    "...",
    "\u2026",
    "<",
    ">",
    "${",
    "{{",
    "}}",
    "%(",
    "$(",
    "password",
    "passwort",
    "secret",
    "token",
    "replace",
    "insert",
)

# Whole values that are defaults or stand-ins; matched case-insensitively.
_PLACEHOLDER_VALUES = frozenset(
    {
        "pass",
        "passwd",
        "pwd",
        "admin",
        "administrator",
        "root",
        "guest",
        "postgres",
        "mysql",
        "test",
        "testing",
        "default",
        "none",
        "null",
        "nil",
        "true",
        "false",
        "empty",
        "string",
        "str",
        "required",
        "optional",
        "hidden",
        "masked",
        "unset",
        "undefined",
        "foo",
        "bar",
        "foobar",
        "value",
        "key",
        "user",
        "username",
        "tbd",
        "n/a",
        "unknown",
        "omitted",
    }
)

_MASK_ONLY = re.compile(r"[*xX#.\-_\u2022\u00b7 0?]+")
_ENV_NAME = re.compile(r"\$?[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
_SNAKE_WORDS = re.compile(r"[a-z]+(?:_[a-z]+)+")
_DOTTED_NAME = re.compile(r"[a-z_][a-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_PATH_LIKE = re.compile(
    r"(?:[/~]|\.{1,2}/|[A-Za-z]:\\|file:)|.*\.(?:pem|key|json|ya?ml|txt|env|crt|cer|p12|pfx|jks|ppk|pub)$",
    re.IGNORECASE,
)
_REFERENCE_MARKERS = ("://", "os.environ", "getenv", "env(", "env[", "secrets.", "vault:", "secretkeyref")
_HYPHEN_WORDS = re.compile(r"[A-Za-z0-9.]+(?:-[A-Za-z]{3,})+")
_CAMEL_TOKENS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
_ALNUM_RUNS = re.compile(r"[A-Za-z0-9]+")
_HEX_ONLY = re.compile(r"[0-9a-fA-F]+")
_TOKEN_SEPARATORS = re.compile(r"[-_.~+/=]")
_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")

# Randomness thresholds; the module docstring explains where they come from.
MIN_ENTROPY_BITS = 3.5
MAX_MEAN_TOKEN_LENGTH = 3.0
MIN_ALNUM_RUN = 16


def _shannon_entropy(value: str) -> float:
    """Bits per character of `value`, from its own character frequencies (0.0 for an empty string)."""
    if not value:
        return 0.0
    length = len(value)
    return -sum(n / length * math.log2(n / length) for n in Counter(value).values())


_MARKERS = re.compile(
    "|".join(
        re.escape(form)
        for marker in _PLACEHOLDER_MARKERS
        for form in sorted({marker, marker.upper(), marker.capitalize()})
    )
)


def _is_placeholder(value: str) -> bool:
    lowered = value.lower()
    if lowered in _PLACEHOLDER_VALUES or len(set(lowered)) <= 2 or _MASK_ONLY.fullmatch(value):
        return True
    return _MARKERS.search(value) is not None


def _is_reference(value: str) -> bool:
    """A name that points at a secret kept elsewhere (env var, attribute, call, path, URL)."""
    if value.startswith(("$", "%", "@", "&", "*")) or "(" in value:
        return True
    if _ENV_NAME.fullmatch(value) or _SNAKE_WORDS.fullmatch(value) or _DOTTED_NAME.fullmatch(value):
        return True
    if _PATH_LIKE.match(value):
        return True
    lowered = value.lower()
    return any(marker in lowered for marker in _REFERENCE_MARKERS)


_LOWER = re.compile(r"[a-z]")
_UPPER = re.compile(r"[A-Z]")
_DIGIT = re.compile(r"[0-9]")
_OTHER = re.compile(r"[^A-Za-z0-9]")


def _classes(value: str) -> tuple[bool, bool, bool, bool]:
    """(has a-z, has A-Z, has 0-9, has anything else: symbols and non-ASCII letters count as symbols)."""
    return (
        _LOWER.search(value) is not None,
        _UPPER.search(value) is not None,
        _DIGIT.search(value) is not None,
        _OTHER.search(value) is not None,
    )


def _looks_random(value: str, *, mixed_case: bool = True) -> bool:
    """True for machine-generated strings (tokens, keys), false for words, identifiers and paths.

    With ``mixed_case`` the string needs upper- and lowercase letters (and a digit, unless it is long
    and very fragmented) and must change character class often; without it (single-case tokens)
    letters and digits must both be present in fair amounts.
    """
    # Cheapest tests first: this runs on every long run of letters and digits in a text.
    if len(value) < 20 or _HEX_ONLY.fullmatch(value) or _UUID.fullmatch(value):
        return False
    lower, upper, digit, _ = _classes(value)
    if mixed_case and not (lower and upper):
        return False
    if max((len(run) for run in _ALNUM_RUNS.findall(value)), default=0) < MIN_ALNUM_RUN:
        return False
    if _shannon_entropy(value) < MIN_ENTROPY_BITS:
        return False
    if mixed_case:
        tokens = _CAMEL_TOKENS.findall(value)
        mean_token = sum(map(len, tokens)) / max(1, len(tokens))
        # About one random base62 string in 300 has no digit; letters alone then need more evidence.
        if not digit:
            return len(value) >= 24 and mean_token <= MAX_MEAN_TOKEN_LENGTH - 0.5
        return mean_token <= MAX_MEAN_TOKEN_LENGTH
    digits = len(_DIGIT.findall(value))
    return 0.15 <= digits / len(value) <= 0.6


def _opaque_token(value: str) -> bool:
    """A bearer token: random in mixed case, or in one case with digits (hex excluded)."""
    if _is_placeholder(value):
        return False
    # Separators are part of the alphabet of base64url tokens; they say nothing about randomness.
    joined = _TOKEN_SEPARATORS.sub("", value)
    return _looks_random(joined) or _looks_random(joined.lower(), mixed_case=False)


def _varied(value: str) -> bool:
    """For vendor tokens whose prefix already says "secret": reject masks and stand-ins only."""
    return not _is_placeholder(value) and len(set(value)) >= 8


def _assigned_value_is_secret(value: str) -> bool:
    """The value of an explicit assignment (``password=...``, or a quoted value)."""
    if len(value) < 6 or any(c.isspace() for c in value):
        return False
    if _is_placeholder(value) or _is_reference(value):
        return False
    _, _, digit, other = _classes(value)
    return len(value) >= 8 or digit or other


def _credential_like(value: str) -> bool:
    """A value in a position that prose also uses (``Token: value``, "the password is X")."""
    if len(value) < 8 or _is_placeholder(value) or _is_reference(value):
        return False
    if _HYPHEN_WORDS.fullmatch(value):
        return False
    # Hex is common in prose (SHAs, digests) but a long hex value right after "token:" is a token.
    if len(value) >= 32 and _HEX_ONLY.fullmatch(value):
        return True
    lower, upper, digit, other = _classes(value)
    if lower and digit and (upper or other):
        return True
    return _looks_random(value, mixed_case=False)


_TRAILING_PUNCT = ".,;:!?)]}"


def _unquote(raw: str) -> tuple[str, bool]:
    """Strip quotes (returns the value and whether it was quoted) or trailing sentence punctuation."""
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'`":
        return raw[1:-1].strip(), True
    return raw.rstrip(_TRAILING_PUNCT), False


# ---------------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------------

_Check = Callable[["re.Match[str]"], bool]


def _always(_: re.Match[str]) -> bool:
    return True


@dataclass(frozen=True)
class _Rule:
    """One detector. Speed matters (every save runs all of them), hence the three optional fields.

    ``hints``: lowercase substrings, one of which the text must contain for the pattern to be worth
    running. ``not_after``: characters that must not come right before a match; checked here rather
    than with a look-behind because a pattern that starts with a literal is searched for far faster.
    ``exact``: set for rules about words in any case (``Password``, ``API_KEY``): `pattern` is then
    searched in the lowercased text, five to ten times faster than a case-insensitive search, and
    `exact` (the same pattern, case-insensitive) re-reads each hit from the original text so that
    the value keeps its case.
    """

    kind: str
    pattern: re.Pattern[str]
    check: _Check = _always
    hints: tuple[str, ...] = ()
    not_after: str = ""
    exact: re.Pattern[str] | None = None


def _any_case(kind: str, source: str, check: _Check, hints: tuple[str, ...], not_after: str = "") -> _Rule:
    """A rule whose lowercase `source` is matched regardless of case (see `_Rule.exact`)."""
    return _Rule(kind, re.compile(source), check, hints, not_after, re.compile(source, re.IGNORECASE))


def _value(test: Callable[[str], bool]) -> _Check:
    """A check that applies `test` to the pattern's ``v`` group."""

    def check(match: re.Match[str]) -> bool:
        return test(match.group("v"))

    return check


def _jwt_header_has_alg(match: re.Match[str]) -> bool:
    segment = match.group("h")
    try:
        header = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (binascii.Error, ValueError):
        return False
    return isinstance(header, dict) and "alg" in header


def _basic_auth_decodes(match: re.Match[str]) -> bool:
    try:
        decoded = base64.b64decode(match.group("v"), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    user, sep, password = decoded.partition(":")
    return bool(sep and user) and len(password) >= 4 and not _is_placeholder(password)


def _url_password(password: str) -> bool:
    return len(password) >= 4 and not _is_placeholder(password) and not _is_reference(password)


def _assignment(match: re.Match[str]) -> bool:
    value, quoted = _unquote(match.group("v"))
    # A call or index right after the value (``password=get_secret("db")``) is a reference.
    if not quoted and match.end() < len(match.string) and match.string[match.end()] in "([":
        return False
    if quoted or match.group("sep") != ":":
        return _assigned_value_is_secret(value)
    return _credential_like(value)


# "key" alone is too common a name (``key=value``, ``sort key:``); it counts with a qualifier.
_KEY_QUALIFIER = re.compile(
    r"(?i:api|access|secret|private|signing|encryption|master|client|auth|app|account)[ _-]?$"
)


def _secret_assignment(match: re.Match[str]) -> bool:
    start = match.start()
    if match.group("name").lower() == "key" and not _KEY_QUALIFIER.search(
        match.string, max(0, start - 12), start
    ):
        return False
    return _assignment(match)


def _curl_user(match: re.Match[str]) -> bool:
    """``-u user:password`` on a curl command line."""
    line_start = match.string.rfind("\n", 0, match.start()) + 1
    if _CURL.search(match.string, line_start, match.start()) is None:
        return False
    return _assigned_value_is_secret(match.group("v"))


def _prose_password(match: re.Match[str]) -> bool:
    value, quoted = _unquote(match.group("v"))
    return _assigned_value_is_secret(value) if quoted else _credential_like(value)


_CURL = re.compile(r"\bcurl\s")
_WORD = string.ascii_letters + string.digits + "_"
_WORD_DASH = _WORD + "-"
_B64 = r"[A-Za-z0-9+/]"

_PASSWORD_NAMES = r"passwor[dt]|passwd|pwd|passphrase|passcode|kennwort"
_PASSWORD_HINTS = ("passw", "pwd", "passphrase", "passcode", "kennwort")
_ASSIGNED_VALUE = r"""(?P<v>"[^"\n]{0,200}"|'[^'\n]{0,200}'|`[^`\n]{0,200}`|[^\s"'`,;]{1,300})"""
# The name may carry any prefix (db_password, PGPASSWORD, x-api-key) but must end the key:
# ``password_policy=strict`` is not a password.
_NAME_END_AND_SEPARATOR = r"""(?![A-Za-z0-9_-])["']?[ \t]*(?P<sep>:=|=>|=|:)[ \t]*"""

_RULES: tuple[_Rule, ...] = (
    # Vendor formats. The service-account JSON comes before the PEM rule: it embeds a private key,
    # and "service-account key" is the better name for it.
    _Rule(
        "gcp_service_account",
        re.compile(r'"private_key_id"\s*:\s*"[0-9a-f]{32,40}"|"private_key"\s*:\s*"-----BEGIN'),
        hints=('"private_key',),
    ),
    _Rule(
        "aws_access_key",
        re.compile(r"(?P<v>(?:AKIA|ASIA)[A-Z0-9]{16})(?![A-Za-z0-9_])"),
        _value(lambda v: "EXAMPLE" not in v),
        not_after=_WORD,
    ),
    _any_case(
        "aws_secret_key",
        r"(?:aws[ _-]?secret(?:[ _-]?access)?(?:[ _-]?key)?|secret[ _-]?access[ _-]?key)"
        rf"""["']?[ \t]*(?::=|=>|=|:|\bis\b)?[ \t]*["']?(?P<v>{_B64}{{40}})(?![A-Za-z0-9+/=])""",
        _value(lambda v: _varied(v) and _DIGIT.search(v) is not None),
        hints=("aws", "secret"),
    ),
    _any_case(
        "azure_storage_key",
        rf"(?:accountkey|sharedaccesskey)={_B64}{{30,}}",
        _always,
        hints=("accountkey", "sharedaccesskey"),
    ),
    _any_case(
        "azure_storage_key",
        rf"azure[^\n]{{0,80}}?(?<![A-Za-z0-9+/]){_B64}{{86}}==",
        _always,
        hints=("azure",),
    ),
    _Rule(
        "azure_sas_token",
        re.compile(r"[?&]sv=\d{4}-\d\d-\d\d&\S*?\bsig=[A-Za-z0-9%+/]{30,}"),
        hints=("sig=",),
    ),
    _Rule(
        "github_token",
        re.compile(r"(?P<v>gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{50,})(?![A-Za-z0-9_])"),
        _value(_varied),
        not_after=_WORD,
    ),
    _Rule(
        "gitlab_token",
        re.compile(r"(?P<v>gl(?:pat|dt|rt|ptt|cbt|soat|ft)-[A-Za-z0-9_-]{20,})"),
        _value(_varied),
        not_after=_WORD_DASH,
    ),
    _Rule(
        "slack_webhook",
        re.compile(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/T[A-Z0-9]+/[A-Za-z0-9/]{20,}"),
    ),
    _Rule(
        "slack_token",
        re.compile(r"(?P<v>xox[abposr]-[0-9A-Za-z-]{10,}|xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+)"),
        _value(_varied),
        not_after=_WORD_DASH,
    ),
    _Rule(
        "stripe_key",
        re.compile(r"(?P<v>(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}|whsec_[A-Za-z0-9]{24,})"),
        _value(_varied),
        hints=("k_live_", "k_test_", "whsec_"),
        not_after=_WORD,
    ),
    _Rule(
        "anthropic_api_key",
        re.compile(r"(?P<v>sk-ant-[A-Za-z0-9_-]{32,})"),
        _value(_varied),
        not_after=_WORD_DASH,
    ),
    _Rule(
        "openai_api_key",
        re.compile(r"sk-(?:proj-|svcacct-|admin-)?(?P<v>[A-Za-z0-9_-]{20,})"),
        _value(lambda v: _varied(v) and _looks_random(_TOKEN_SEPARATORS.sub("", v))),
        not_after=_WORD_DASH,
    ),
    _Rule(
        "google_api_key",
        re.compile(r"(?P<v>AIza[0-9A-Za-z_-]{35})(?![A-Za-z0-9_-])"),
        _value(_varied),
        not_after=_WORD_DASH,
    ),
    _Rule(
        "sendgrid_api_key",
        re.compile(r"(?P<v>SG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{30,50})"),
        _value(_varied),
        not_after=_WORD_DASH,
    ),
    _Rule(
        "twilio_key",
        re.compile(r"SK[0-9a-fA-F]{32}(?![A-Za-z0-9])"),
        not_after=_WORD,
    ),
    _any_case(
        "twilio_key",
        r"twilio[^\n]{0,80}?(?<![A-Za-z0-9])[0-9a-f]{32}(?![A-Za-z0-9])",
        _always,
        hints=("twilio",),
    ),
    _Rule(
        "npm_token",
        re.compile(r"(?P<v>npm_[A-Za-z0-9]{36})(?![A-Za-z0-9_])"),
        _value(_varied),
        not_after=_WORD,
    ),
    _Rule(
        "huggingface_token",
        re.compile(r"(?P<v>(?:hf|api_org)_[A-Za-z0-9]{30,40})(?![A-Za-z0-9_])"),
        _value(lambda v: _varied(v) and _shannon_entropy(v.split("_")[-1]) >= MIN_ENTROPY_BITS),
        hints=("hf_", "api_org_"),
        not_after=_WORD,
    ),
    # Structural formats.
    _Rule(
        "jwt",
        re.compile(r"(?P<h>ey[A-Za-z0-9_-]{10,})\.ey[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{16,}"),
        _jwt_header_has_alg,
        not_after=_WORD_DASH,
    ),
    _Rule(
        "private_key",
        re.compile(
            r"-----BEGIN[A-Z0-9 ]{0,20} PRIVATE KEY(?: BLOCK)?-----(?:\\[nr]|\s)*"
            r"(?:Proc-Type:|Version:|[A-Za-z0-9+/=]{20})"
        ),
    ),
    _Rule(
        "connection_string_password",
        re.compile(r"://[^\s:/?#@]*:(?P<v>[^\s/?#@]+)@[^\s/?#@]"),
        _value(_url_password),
        hints=("://",),
    ),
    _any_case(
        "basic_auth",
        rf"authorization[\"']?\s*[:=]\s*[\"']?basic\s+(?P<v>{_B64}{{8,}}={{0,2}})",
        _basic_auth_decodes,
        hints=("authorization",),
    ),
    _Rule(
        "basic_auth",
        re.compile(r"""(?:-u|--user)\s+["']?[^\s:"']+:(?P<v>[^\s"']+)"""),
        _curl_user,
        hints=("curl",),
        not_after=_WORD_DASH,
    ),
    _any_case(
        "bearer_token",
        r"bearer\s+(?P<v>[A-Za-z0-9._~+/-]{20,}=*)",
        _value(_opaque_token),
        hints=("bearer",),
        not_after=string.ascii_letters,
    ),
    # Assignments, then the prose form of a password.
    _any_case(
        "password_assignment",
        rf"(?:{_PASSWORD_NAMES}){_NAME_END_AND_SEPARATOR}{_ASSIGNED_VALUE}",
        _assignment,
        hints=_PASSWORD_HINTS,
    ),
    _any_case(
        "password_assignment",
        rf"\b(?:{_PASSWORD_NAMES})\b[^\n.]{{0,40}}?\s(?:is|was|ist|lautet|war|è|era)\s+(?:now\s+|jetzt\s+|ora\s+)?"
        r"""(?P<v>"[^"\n]{1,100}"|'[^'\n]{1,100}'|`[^`\n]{1,100}`|[^\s"'`,;]{1,100})""",
        _prose_password,
        hints=_PASSWORD_HINTS,
    ),
    _any_case(
        "secret_assignment",
        rf"(?P<name>secret|token|credentials?|key){_NAME_END_AND_SEPARATOR}{_ASSIGNED_VALUE}",
        _secret_assignment,
        hints=("secret", "token", "credential", "key"),
    ),
)

_SECRET_WORD = re.compile(
    r"(?<![A-Za-z])(?i:api[_-]?key|keys?|secrets?|tokens?|credentials?|passwor[dt]s?|passwd|kennwort|"
    r"chiave|chiavi|schl[üu]ssel|segreto|passphrase)(?![a-z])"
)
_SECRET_WORD_HINTS = ("key", "secret", "token", "credential", "passw", "kennwort", "chiav", "schl", "segret")
_CANDIDATE = re.compile(r"[A-Za-z0-9+/_=-]{20,}")
_CONTEXT_BEFORE = 60
_CONTEXT_AFTER = 30
# Random-looking but public: digests and fingerprints (SHA256:..., sha384-... in SRI attributes)
# and Stripe publishable keys.
_PUBLIC_PREFIX = re.compile(r"(?i:sha\d{1,3}|md5)-|pk_(?:live|test)_")
_DIGEST_BEFORE = re.compile(r"(?i:sha\d{0,3}|md5):$")
# Random-looking but public by what precedes it: SSH public keys, "public key", fingerprints, digests.
_PUBLIC_BEFORE = re.compile(
    r"(?:ssh-(?:rsa|dss|ed25519)|ecdsa-sha2-nistp\d+|(?i:\bpublic|\bfingerprint|\bchecksum|\bdigest))"
    r"[^\n]{0,30}$"
)


def _is_public_or_id(text: str, match: re.Match[str]) -> bool:
    """Random-looking strings that are public or identifiers by their shape or what precedes them."""
    start = match.start()
    if _PUBLIC_PREFIX.match(match.group()):
        return True
    if _DIGEST_BEFORE.search(text, max(0, start - 8), start) or _PUBLIC_BEFORE.search(
        text, max(0, start - 50), start
    ):
        return True
    # Inside a URL a random segment is a resource id (a Google Docs id, a short link); URLs that
    # carry credentials are caught by the user-info, query-assignment and vendor rules.
    word_start = max(text.rfind(" ", 0, start), text.rfind("\n", 0, start)) + 1
    return "://" in text[word_start:start]


def _generic_high_entropy(text: str) -> bool:
    """A random-looking string with a credential word shortly before or after it on the same line."""
    for match in _CANDIDATE.finditer(text):
        candidate = match.group().rstrip("=")
        if not _looks_random(candidate) or _is_placeholder(candidate) or _is_public_or_id(text, match):
            continue
        line_start = text.rfind("\n", 0, match.start()) + 1
        line_end = text.find("\n", match.end())
        line_end = len(text) if line_end < 0 else line_end
        before = text[max(line_start, match.start() - _CONTEXT_BEFORE) : match.start()]
        after = text[match.end() : min(line_end, match.end() + _CONTEXT_AFTER)]
        if _SECRET_WORD.search(before) or _SECRET_WORD.search(after):
            return True
    return False


def _lower_same_length(text: str) -> str:
    """`text` in lowercase, character for character, so that positions in both agree."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    # A few characters lowercase to two (U+0130 "İ" -> "i̇"); keep those as they are.
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


def find_secret(text: str) -> SecretMatch | None:
    """Return the first credential found in `text` (rules in the module docstring), or None."""
    lowered = _lower_same_length(text)
    for rule in _RULES:
        if rule.hints and not any(hint in lowered for hint in rule.hints):
            continue
        for found in rule.pattern.finditer(lowered if rule.exact else text):
            start = found.start()
            if start and text[start - 1] in rule.not_after:
                continue
            match = rule.exact.match(text, start) if rule.exact else found
            if match is not None and rule.check(match):
                return SecretMatch(rule.kind, _LABELS[rule.kind])
    if any(hint in lowered for hint in _SECRET_WORD_HINTS) and _generic_high_entropy(text):
        return SecretMatch("generic_high_entropy", _LABELS["generic_high_entropy"])
    return None
