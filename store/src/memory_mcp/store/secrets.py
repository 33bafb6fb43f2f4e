"""Credential detection for memory content: `find_secret` says whether a text looks like it holds a secret.

Memories are shared with everyone in a space and end up in prompts, so a write whose content looks
like a credential is refused and the refusal names the kind found (see `SECRET_KINDS`). Detection is
a fixed list of rules tried in order, most specific first; the first rule that matches wins, so a
GitHub token assigned to ``GITHUB_TOKEN=`` is reported as a GitHub token, not as a generic assignment.

The rules read the text as a person sees it (`_normalise`): format characters (zero-width space
and joiners, soft hyphen, BOM, bidi controls, tag characters) and combining marks are removed, NFKC
folds fullwidth and mathematical letters, and look-alikes inside Latin words (``ghр_`` with a
Cyrillic ``р``, ``ɡhp_`` with IPA ``ɡ``, Armenian, Cherokee, small capitals...) are folded to ASCII by
a confusable skeleton taken from Unicode's confusables data (UTS #39). Words wholly in another script
are left alone, so ``пароль`` stays a word the rules know. A blank inside a token (braille blank,
ideographic or thin space) is tried both ways: as a blank, and removed (`_variants`). A value
continued on the next line is read joined as well: a shell command broken with a backslash, a
YAML block scalar (``password: |`` and the value indented below), a literal that a formatter moved
below its ``=``. Base64 in the text is decoded once and read again: a token or an ``id:secret``
pair inside it is refused, and so is a PEM body whose BEGIN/END lines were left out (its DER opens
like a private key's).

Rules
-----
0. **This project's keys**: ``mmk_<prefix>_<secret>`` (``store/keys.py``), in prose, exports and
   config files alike.
1. **Vendor formats** with a recognisable prefix or shape: Google Cloud service-account JSON
   (``private_key_id`` or an inline ``private_key``), AWS access key ids (``AKIA``/``ASIA``/``ABIA``/``ACCA``
   + 16),
   AWS secret keys (40 base64 characters introduced by an AWS secret-key name), Azure storage account
   keys, connection strings and SAS signatures, GitHub (``ghp_ gho_ ghs_ ghu_ ghr_ github_pat_``),
   GitLab (every prefix: ``glpat-``, ``gloas-``, ``glrt-``, ``GR1348941``, ...), Discord bot tokens,
   Mailchimp keys (``<32 hex>-us6``), the prefixed tokens of the table in `secret_formats` (PyPI of
   any index and cut short, Vault, Doppler, Sentry, Fly.io, ...), Slack tokens (``xoxb-`` ...), webhook URLs (Slack, Discord,
   Microsoft Teams and Power Automate workflows), Stripe (``sk_live_``, ``rk_live_``, ``sk_test_``,
   ``whsec_``), Anthropic (``sk-ant-``), OpenAI (``sk-``, ``sk-proj-``), Google API keys (``AIza``),
   Google OAuth client secrets and access tokens (``GOCSPX-``, ``ya29.``), Azure AD client secrets
   (``xxx8Q~...``), SendGrid (``SG.x.y``), Twilio (``SK`` + 32 hex, or 32 hex next to the word
   Twilio), npm (``npm_``), Hugging Face (``hf_``), Tailscale (``tskey-<type>-<id>-<secret>``, also
   glued to a name); GitHub App installation tokens that carry a JWT (``ghs_<id>_<JWT>``); Stripe
   test-mode keys as well as live ones. **Identifiable tokens** of vendors no rule names: a
   lowercase prefix of one or two words joined by ``_`` or ``-`` (``acme_live_``, ``tvly-``) and a
   body of 30+ base62 characters with all three classes, random (entropy, class changes), neither a
   walk along the alphabet nor mostly words, the whole a token of its own; prefixes of public keys
   and ids (``pk_``, ``phc_``, ``ca_``, ``cs_``, ``sha512-``) and made-up names (``foo_``, ``test_``)
   excepted. A vendor token with a marker word in it (``lin_api_<32 random>EXAMPLE``) is still a
   key when what is left around the word is random (24+ characters); webhook URLs whose path is the secret
   (``/hooks/<random>``: Mattermost, Rocket.Chat; Zapier catch hooks, IFTTT maker keys) and URLs with a
   random ``key``/``token``/``sig`` parameter; keys of services without a prefix of their own
   (Datadog, New Relic, PagerDuty, Mailgun, ...: a key-shaped value, hex included, after the name),
   and any ``<service>_key``/``--<service>-key`` with a key-shaped value, random or not, unless the
   word before ``key`` names a data-structure key (``cache_key``, ``sort_key``, ``public_key``).
   **Documented example keys pass only as clearly marked examples**: ``AKIAIOSFODNN7EXAMPLE``, its
   secret ``wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY``, the second AWS pair and Stripe's published
   test keys pass in a text that calls them an example, sample or documentation; alone or in a
   config line they are refused, because they have the shape of real keys, every scanner downstream
   (push protection, CI, log scrubbers) flags a copy, and an agent that learns one from a memory
   pastes it into code. **Masks pass, test keys do not**: a key's place filled with a redacting
   character (``x``, ``X``, ``*``, ``•``, ``#``, ``0``, ``?``: ``AKIAXXXXXXXXXXXXXXXX``,
   ``glpat-xxxxxxxxxxxxxxxxxxxx``) is a mask; filled with any other repeated character or a repeated
   unit of up to 12 (``AKIAZZZZZZZZZZZZZZZZ``, ``hvb.bbbb...``, ``abcd1234abcd1234...`` after a
   key's name) it is a test key, refused for the same reasons as the documented examples.
   Also Docker registry ``"auth"`` values (base64 of ``user:password``), an Azure storage key (88
   characters of base64) after the name of one, on its line or the next, Tableau token secrets
   (``<22>==:<32>``), MaxMind license keys (``..._mmk``) and a UUID after ``Bearer``. HashiCorp:
   Vault tokens (``hvs.``/``hvr.`` with 24 random characters or 90+, ``hvb.``; the legacy ``s.``/``b.``
   and 24 only after a Vault word), Terraform Cloud tokens (``<14>.atlasv1.<60-70>``), and Consul and
   Nomad ACL tokens, UUIDs, after their header or variable name (``X-Consul-Token``, ``NOMAD_TOKEN``)
   or ``-token`` on their own command line. Mailgun keys (``key-`` and 32 hex as a token of its
   own), Kolide (``k2sk_v1_``), Amazon MWS (``amzn.mws.<uuid>``), Onfido (``api_live.``,
   ``api_live_us.``, ...), Braintree access tokens (``access_token$production$...``), AWS session
   tokens (by the encoded opening of their base64, or after ``AWS_SESSION_TOKEN`` or
   ``X-Amz-Security-Token``; a few characters masked inside one leave the rest a token), SoftLayer
   keys (64 hex after the name) and Snyk tokens (a UUID after a Snyk name that is not an id's, or
   ``snyk auth``). Telegram bot tokens whose secret does not open with ``AA``, in a text that names
   Telegram (``tgram://``); SonarQube's ``sonar.login`` with 40 hex; Vault unseal keys after
   ``unseal``; the hex of "Your Acme key is <32+ hex>" (not a cache, sort, object or public key).
2. **Structural formats**: JWTs (three base64url segments whose header decodes to a JSON object with
   ``alg``; without the signature, the payload must decode to a JSON object too; encrypted ones,
   JWE, five segments after such a header: NextAuth's session cookie), PEM private-key
   blocks (a ``BEGIN ... PRIVATE KEY`` line followed by key material, also on quoted or commented
   lines; or a whole BEGIN/END block whose body is not a stand-in; or the header alone on its line
   at the end of the text, a paste cut off after its first line), the
   same block base64-encoded once more (``LS0tLS1CRUdJTi...``, as Kubernetes Secret data holds it),
   URLs with a password in the user-info part (``postgres://user:pw@host``, ``redis://:pw@host``),
   ``Authorization: Basic <base64 user:password>``, ``.npmrc``'s ``_auth=``, ``curl -u user:password`` and
   ``Bearer <token>``, and ``Authorization:`` with any other scheme and a token (``SSWS``, ``Bot``,
   ``Klaviyo-API-Key``; a UUID after ``Splunk`` or ``GenieKey``); Oracle JDBC URLs
   (``jdbc:oracle:thin:USER/PASSWORD@host``), ``.pgpass`` lines
   (``host:port:db:user:password``) and ODBC passwords in braces (``Pwd={pa;ss}``). **Password
   hashes** in the formats that store them (`secret_formats.PASSWORD_HASH_FORMATS`: bcrypt, md5-,
   sha256- and sha512-crypt, apr1, yescrypt, Argon2, scrypt, PBKDF2 as passlib, Django and Werkzeug
   write it, LDAP ``{SSHA}``, PostgreSQL SCRAM verifiers) and pwdump lines (``user:RID:LM:NT:::``):
   a hash is cracked offline at the attacker's speed, so it is kept like the password it hides.
3. **Command lines**: the value of a password flag after its own tool (``sshpass -p``, ``mysql
   -pVALUE``, ``redis-cli -a``, ``docker login -p``, ``ldapsearch -w``, ``openssl -passin pass:``,
   ``keytool -storepass``, ``smbclient -U user%pw``, ...) and long flags of any tool (``--password X``,
   ``--db-password=X``, ``--passphrase X``). On a command line a plain word is the password as typed,
   so ``sshpass -p secret`` is refused; references (``"$SSH_PASS"``), prompts (``mysql -p db``),
   ports (``-P 3306``) and prose ("redis-cli -a option is deprecated") are not. Positional and
   Windows-style passwords too: ``net use ... PASSWORD /user:``, ``htpasswd -b FILE USER PASSWORD``,
   ``sqlplus USER/PASSWORD``, ``echo USER:PASSWORD | chpasswd``, ``xfreerdp /p:``, ``wmic /password:``,
   ``net user NAME PASSWORD /add``, impacket's ``DOMAIN/USER:PASSWORD@HOST``, ``-p`` of PsExec (as
   Windows writes it, ``PsExec64.exe``), crackmapexec, evil-winrm and the like, ``-U USER%PASSWORD``
   of the Samba tools, and ``SSHPASS=``/``PGPASSWORD=``/``MYSQL_PWD=`` set for the one command that
   reads it. A command counts inside a string literal of code too (``system("psexec ... -p X")``,
   ``cmd = 'mysql ...'``) and after Windows' ``cmd /c`` and ``start``.
4. **Assignments**: a credential-like name (``password``, ``passwd``, ``pwd``, ``pw``, ``pass``,
   ``passphrase``, ``Passwort``, ``Kennwort``, ``mot de passe``, ``mdp``, ``contraseña``, ``clave``,
   ``senha``, ``palavra-passe``, ``wachtwoord``, ``parola d'ordine``, ``hasło``, ``lösenord``,
   ``passord``, ``adgangskode``, ``salasana``, ``şifre``, ``heslo``, ``пароль``, ``secret``, ``token``,
   ``api_key``, ``client_secret``, ...) at the end of a key, followed by ``=``, ``:=``, ``=>`` or ``:``
   and a value, or compared with a literal (``password == "..."``, ``"..." != api_key``); a number
   or C array brackets may follow the name (``api_key2``, ``char pw[] = ...``), a C# value may be
   verbatim (``@"..."``), and ``secrete`` (French *secrète* without its accent) counts as secret. A
   quoted value of four to eight words after ``=`` (not ``:``) is a passphrase. Keys in camelCase
   (``fastlyKey = "<random>"``; not ``cacheKey``), XML elements named after a credential
   (``<password>X</password>``, Jenkins' ``<secret>{AQAAABAAAA...}</secret>``) and a name and value
   as two string literals (``Header.Set("X-Api-Key", "...")``, ``{ "AccountKey", "..." }``) too, and
   as XML attributes (``<add key="SmtpPassword" value="..."/>``, ``<entry key="db.password">...``,
   ``<string name="hockeyapp_key">`` with a key-shaped value); a
   literal password as the third argument of a connection call (``mysqli_connect``, ``new PDO``,
   ``DriverManager.getConnection``); a credential object built from literals (``new
   NetworkCredential("u", "...")``, ``PasswordAuthentication``, ``new DirectoryEntry(path, "u", "...")``);
   a name assigned through a subscript (``config['password'] = ...``, ``os.environ["API_KEY"] = ...``);
   a table row naming a credential in one cell and holding it in the next (``| DB password | X |``,
   a password there as `_password_like` reads one, a key as random or key-shaped); a literal quoted
   twice (Android's ``buildConfigField "String", "API_KEY", "\\"...\\""``); Jenkins' encrypted
   secret header (``{AQAAABAAA ...}``) beside a word of letters and digits; front-end build
   variables named after a credential
   (``REACT_APP_``, ``NEXT_PUBLIC_``, ``VITE_``, ``EXPO_PUBLIC_``, ``VUE_APP_``, ...: shipped to every
   browser); after the colon of a compound name (``auth_token: ...``, YAML rather than prose) a value
   of 8+ characters with a letter and a digit or a symbol.
   The prose forms "the password is X" in those languages ("das Passwort lautet X",
   "le mot de passe est X", "la contraseña es X", "het wachtwoord is X", "hasło do bazy to X", ...),
   a password word right before a value ("Passwort Sommer2024!"), "login: user / password", and
   "the signing key is X" for secrets and tokens. Also Greek, Hungarian, Romanian, Indonesian and
   Vietnamese, and Japanese, Chinese and Korean with their particles (``パスワードはX``, ``密码是X``,
   ``비밀번호는 X``); and the value before the word: "use X as the password", "nimm X als Passwort",
   "prends X comme mot de passe", "X is the new password".
   A plain word in a password's place is the password (`_plain_password`): quoted, in a password's
   XML element or attribute, given to a setter or a login call, in a Dockerfile ``ENV``, a ``.netrc``
   entry, SQL's ``IDENTIFIED BY``, or unquoted where it ends its line or field, and after a colon
   only where the name starts its line (``password: letmein`` in a config file); unless it stands
   for one (a status or type word, a code name, credential words alone, a password word).
5. **Generic high entropy**: a random-looking string of 20+ characters (mixed case, or lowercase with
   digits; in ``Key=value`` the value alone) within a few words of a credential word on the same line: ``key``, ``secret``, ``token``,
   ``password``, ``credential`` and their equivalents in the languages above (``clé``, ``jeton``,
   ``clave``, ``chave``, ``sleutel``, ``Schlüssel``, ``chiave``, ``klucz``, ``nyckel``, ``ключ``, ...).

6. **Random tokens with no name** (round 7): a run of 28+ token characters anywhere in a text that
   the bare-key test calls random (mixed case, or lowercase with digits; entropy, class changes, not
   a walk along the alphabet, not mostly words, not base64 of readable text), unless its shape or the
   word before it says it is public or an id: prefixed ids, ``0x`` and hex, legacy Bitcoin addresses,
   paths, data URIs and files' base64, the body of a certificate, PGP signature or public key, JWK
   public members, and a name such as id, file, hash, digest, nonce, salt, cursor, ETag, signature,
   ciphertext, wallet or address, public key or pin just before it. Tried last, on the text as
   normalised, after every other rule has passed every reading.

What does *not* count as a secret (so that notes *about* credentials can be saved):

- **Placeholders and references**: values in angle brackets or templates (``<password>``,
  ``${DB_PASSWORD}``, ``{{ secrets.token }}``, ``%(pw)s``, ``$(cat file)``, an f-string's
  ``{name}`` or ``{call(args)}`` as the whole value: the whole construct, with
  an expression inside the braces; a lone ``<``, ``>`` or ``$(``, or braces around symbols
  (``m{{h}o)p${e]...``), are characters of a password), masked values (``***``, ``xxxx``, ``...``),
  values containing marker words (``example``, ``your``, ``changeme``, ``redacted``, ``dummy``,
  ``placeholder``, ``sample``, or the words password/secret/token in a value of words only, as in
  ``my-secret-token``; ``MySecret2024!`` is a password),
  environment-variable names (``DB_PASSWORD``), dotted names and calls (``settings.db_password``,
  ``os.getenv(...)``), file paths and URLs.
- **Well-known defaults** (``admin``, ``root``, ``guest``, ``postgres``, ``test``, ``changeme``,
  ``password``, ``secret``, ...): they are public knowledge, and runbook notes such as "the local
  compose file uses postgres:postgres" are worth keeping. On a command line only the product defaults
  (``root``, ``admin``, ...) pass; ``secret`` and ``password`` typed after ``-p`` are passwords.
- **Bare identifiers**: git SHAs, digests and checksums (pure hex; a password hash is refused only in
  a hashing scheme's own format), UUIDs, ticket ids, version strings,
  error codes and colour codes are never flagged on their own, even next to the word "key"; hex
  values are flagged only when assigned to a credential name (``token=<40 hex>``) or next to the
  word Twilio.
- **Prose after a colon**: with an unquoted ``token: value`` (YAML, or an English sentence), the value
  must look like a credential rather than a word: 8+ characters with a lowercase letter, a digit and
  a third class of character, and not a hyphenated word such as ``OAuth2-compatible``; or a long
  random string. After a password word the bar is lower (6+ characters with a letter and a digit or
  a symbol inside: ``Passwort: Sommer2024``), minus technical terms and versions (``SHA256``,
  ``Argon2id``, ``v2.3.1``), unless the name starts a config line and the word ends it (above).
  Quoted values containing spaces are treated as prose (``{"password": "too short"}``), except four
  to eight words assigned with ``=`` (a passphrase).
- **Kubernetes-style names**: lowercase words joined by ``-`` or ``_`` (``existingSecret=memory-keys``)
  are references to a secret, not its value.
- **Identifiers and labels in a credential's place** (round 8): a lower-camelCase identifier after a
  token's or secret's name (``IAM_ROLE_STATEMENTS_TOKEN = 'iamRoleStatements'``, a dependency
  injection token, a secret's name; each part of four or more letters has a vowel), a UI's label
  after a password's key (a word of letters in any script, not lowercase, and a colon:
  ``"one_time_password": "Engangskode:"``), a Rails route whose path has a password segment
  (``get "/password/new" => "passwords#new"``), and GraphQL node ids in base64, which decode to a
  type and an id rather than ``user:password`` (GitHub's legacy ``012:Organization1``, whose prefix
  is the length of the type's name, and Relay's ``User:<number or UUID>``).

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
names substrings the text must contain before its pattern runs, or the substrings its matches start
with (`_Rule.anchors`), so a text that does not mention credentials costs little more than one pass
per vendor prefix and credential word (``bench/secret_detection.py``).
"""

from __future__ import annotations

import base64
import binascii
import html
import itertools
import json
import math
import re
import string
import unicodedata
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import resources

from .keys import KEY_SCHEME, PREFIX_LEN
from .secret_formats import PASSWORD_HASH_FORMATS, TOKEN_FORMATS


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
    SecretKind("memory_mcp_key", "a Memory-MCP API key"),
    SecretKind("aws_access_key", "an AWS access key ID"),
    SecretKind("aws_secret_key", "an AWS secret access key"),
    SecretKind("gcp_service_account", "a Google Cloud service-account key"),
    SecretKind("azure_storage_key", "an Azure storage account key or connection string"),
    SecretKind("azure_sas_token", "an Azure shared access signature"),
    SecretKind("github_token", "a GitHub token"),
    SecretKind("gitlab_token", "a GitLab token"),
    SecretKind("slack_token", "a Slack token"),
    SecretKind("slack_webhook", "a Slack webhook URL"),
    SecretKind("discord_webhook", "a Discord webhook URL"),
    SecretKind("discord_token", "a Discord bot token"),
    SecretKind("teams_webhook", "a Microsoft Teams webhook or workflow URL"),
    SecretKind("stripe_key", "a Stripe secret key"),
    SecretKind("anthropic_api_key", "an Anthropic API key"),
    SecretKind("openai_api_key", "an OpenAI API key"),
    SecretKind("google_api_key", "a Google API key"),
    SecretKind("google_oauth", "a Google OAuth client secret or access token"),
    SecretKind("azure_client_secret", "an Azure AD client secret"),
    SecretKind("sendgrid_api_key", "a SendGrid API key"),
    SecretKind("twilio_key", "a Twilio API key or auth token"),
    SecretKind("npm_token", "an npm access token"),
    SecretKind(
        "service_token",
        "an access token of a known service (PyPI, Mailchimp, Telegram, DigitalOcean, Shopify, Grafana, "
        "Vault, Doppler, Sentry, Tailscale, ...) or a vendor's prefixed token",
    ),
    SecretKind("huggingface_token", "a Hugging Face access token"),
    SecretKind("vendor_api_key", "an API key of a named service (Datadog, New Relic, PagerDuty, ...)"),
    SecretKind("webhook_url", "a webhook or API URL with its secret in the path or a key parameter"),
    SecretKind("jwt", "a JSON Web Token"),
    SecretKind("private_key", "a private key"),
    SecretKind("password_hash", "a password hash (crackable offline)"),
    SecretKind("connection_string_password", "a connection string with an embedded password"),
    SecretKind("basic_auth", "HTTP basic-auth credentials"),
    SecretKind("bearer_token", "a bearer token"),
    SecretKind("cli_password", "a password on a command line"),
    SecretKind("password_assignment", "a password"),
    SecretKind("secret_assignment", "a secret, token or API key value"),
    SecretKind("generic_high_entropy", "a random-looking secret next to a word like key, secret or token"),
    SecretKind("bare_key", "a random key-shaped value saved on its own"),
    SecretKind("random_token", "a random key-shaped token of 28+ characters, with or without a name"),
)

_LABELS: dict[str, str] = {k.kind: k.label for k in SECRET_KINDS}

# ---------------------------------------------------------------------------------------------
# Normalisation: the rules read the text as it looks, not as it is encoded
# ---------------------------------------------------------------------------------------------

# Removed before matching: every format character (Unicode category Cf, as of Unicode 14: zero-width
# space, joiners, word joiner, BOM, soft hyphen, bidi controls, tag characters), combining marks,
# variation selectors and the blank Hangul fillers. Marks go before NFKC can compose them, so that
# ``g`` + U+0301 reads as ``g``; a precomposed ``é`` stays, and word lists spell both forms.
# Characters beyond the BMP have a class of their own: a class that lists a few of them is checked
# range by range, 120 µs per 2,000 characters instead of 9 µs; one range of them costs 14 µs, so
# one search over both says whether there is anything to remove.
_INVISIBLE = re.compile(
    "[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
    "\ufe00-\ufe0f\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0]"
)
_INVISIBLE_OR_BEYOND_BMP = re.compile(_INVISIBLE.pattern[:-1] + "\U00010000-\U0010ffff]")
_INVISIBLE_BEYOND_BMP = re.compile(
    "[\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f\U000e0100-\U000e01ef]"
)

# Cyrillic and Greek letters that render like Latin ones, and the Latin letter each stands for.
# NFKC does not fold these (they are letters of their own scripts), so a token with an ``о`` in
# place of an ``o`` would otherwise pass every vendor pattern.
_LOOK_ALIKES = {
    # Cyrillic
    "а": "a", "в": "b", "е": "e", "ѕ": "s", "і": "i", "ј": "j", "к": "k", "о": "o", "р": "p", "с": "c",
    "у": "y", "х": "x", "һ": "h", "ԁ": "d", "ԛ": "q", "ԝ": "w", "ӏ": "l", "ү": "y",
    "А": "A", "В": "B", "Е": "E", "Ѕ": "S", "І": "I", "Ј": "J", "К": "K", "М": "M", "Н": "H", "О": "O",
    "Р": "P", "С": "C", "Т": "T", "Х": "X", "У": "Y", "Ү": "Y", "Ԛ": "Q", "Ԝ": "W", "Ӏ": "I",
    # Greek
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O",
    "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X", "ο": "o", "ρ": "p", "ι": "i", "κ": "k", "ν": "v", "υ": "u",
    "α": "a", "χ": "x",
    # Latin letters that are not ASCII but read as ASCII
    "ı": "i", "ȷ": "j",
}  # fmt: skip


def _confusable_skeleton() -> dict[str, str]:
    """Every character that Unicode's confusables data (UTS #39, as packaged by
    ``confusable-homoglyphs``) lists as a look-alike of an ASCII letter, digit or ``-_./:``, mapped to
    that character; the hand-written table above wins where both have an entry.

    Only single characters are taken: the sequences TR39 also lists (``rn`` for ``m``) would fold
    ordinary words. Where one character looks like several ASCII ones (``ӏ``: ``l``, ``I``, ``1``),
    letters win over digits and lowercase over uppercase, as the order below says.
    """
    data = json.loads((resources.files("confusable_homoglyphs") / "confusables.json").read_text("utf-8"))
    table: dict[str, str] = {}
    for target in string.ascii_lowercase + string.ascii_uppercase + string.digits + "-_./:":
        for entry in data.get(target, ()):
            char = entry["c"]
            # Characters that NFKC folds already (fullwidth, mathematical) never reach this table,
            # and those beyond the BMP (historic scripts) would make the class a slow one: 7 ms per
            # 2,000 characters of prose instead of 20 µs.
            if (
                len(char) == 1
                and "\u0080" <= char <= "\uffff"
                and char not in table
                and unicodedata.normalize("NFKC", char) == char
            ):
                table[char] = target
    table.update(_LOOK_ALIKES)
    return table


_SKELETON = _confusable_skeleton()
_LOOK_ALIKE_TABLE = str.maketrans(_SKELETON)
_LOOK_ALIKE_CLASS = "".join(re.escape(c) for c in sorted(_SKELETON))
# Only words that mix look-alikes with ASCII letters or digits are folded: a Russian or Greek word
# is left alone (``пароль`` stays a word the rules know). The pattern finds a look-alike next to an
# ASCII letter, digit, ``_`` or ``-``; it starts with the class, which lets the search skip every
# other character quickly (10 µs per 2,000 characters, not 100).
_MIXED_SCRIPT = re.compile(f"[{_LOOK_ALIKE_CLASS}](?:(?<=[A-Za-z0-9_-].)|(?=[A-Za-z0-9_-]))")
# Blanks that a person can put inside a token without it looking split: the braille blank, the
# ideographic space and the other wide or narrow spaces. Between two visible ASCII characters they
# are tried both ways (`_variants`): as a blank, because ``10 000`` and CJK prose use them, and
# removed, because ``ghp_abc\u3000def`` is one token to the eye of whoever pastes it.
_BLANK = re.compile("[\u00a0\u1680\u2000-\u200a\u202f\u205f\u2800\u3000]")
_INNER_BLANK = re.compile("(?<=[!-~])[\u00a0\u1680\u2000-\u200a\u202f\u205f\u2800\u3000]+(?=[!-~])")


# Spacing accents (``¨ ´ ¸ ˘``, Greek tonos, Japanese spacing sound marks) that NFKC turns into a
# space and a combining mark: read as one symbol (``^``), so that ``A,.:-¨@*`` stays one value.
_SPACING_MARKS = {
    c: "^"
    for c in range(0x80, 0x10000)
    if unicodedata.category(chr(c))[0] in "SP"
    and (n := unicodedata.normalize("NFKC", chr(c))) != chr(c)
    and len(n) > 1
    and n[0] == " "
}
_SPACING_MARK = re.compile("[" + "".join(re.escape(chr(c)) for c in sorted(_SPACING_MARKS)) + "]")


def _in_word(char: str) -> bool:
    return char.isalnum() or char in "_-"


def _name_start(text: str, start: int, joiners: str = "_-") -> int:
    """Where the name that ends at ``start`` begins: letters, digits and ``joiners`` before it."""
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] in joiners):
        start -= 1
    return start


def _fold_mixed_words(text: str) -> str:
    """`text` with every word that mixes look-alikes and ASCII folded to ASCII."""
    parts: list[str] = []
    done = 0
    for found in _MIXED_SCRIPT.finditer(text):
        start, end = found.start(), found.end()
        if start < done:
            continue
        while start > done and _in_word(text[start - 1]):
            start -= 1
        while end < len(text) and _in_word(text[end]):
            end += 1
        parts += (text[done:start], text[start:end].translate(_LOOK_ALIKE_TABLE))
        done = end
    parts.append(text[done:])
    return "".join(parts)


_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _normalise(text: str) -> str:
    """`text` as the rules read it: invisible characters and combining marks removed, NFKC, and
    Cyrillic/Greek look-alikes inside Latin words folded to ASCII.

    NFKC folds fullwidth (``ｇｈｐ＿``), mathematical (``𝐀𝐊𝐈𝐀``) and other compatibility forms.
    Measured on 2,000-character texts: nothing to do for ASCII (most memories), about 25 µs for
    German or Russian prose.

    NUL characters (UTF-16 text read as bytes: ``p\0a\0s\0s\0``) and a terminal's colour codes
    (``\x1b[94m``, which glue themselves to the token they colour) are removed first.
    """
    if "\x00" in text:
        text = text.replace("\x00", "")
    if "\x1b" in text:
        text = _ANSI_ESCAPE.sub("", text)
    if text.isascii():
        return text
    if _INVISIBLE_OR_BEYOND_BMP.search(text):
        text = _INVISIBLE_BEYOND_BMP.sub("", _INVISIBLE.sub("", text))
    if _SPACING_MARK.search(text):
        text = text.translate(_SPACING_MARKS)
    return _fold_mixed_words(unicodedata.normalize("NFKC", text))


def _variants(text: str) -> Iterator[str]:
    """The readings the rules try: `text` normalised, then, where a blank sits inside what reads as
    one token (`_INNER_BLANK`), the same with those blanks removed."""
    yield _normalise(text)
    if not text.isascii() and _BLANK.search(text) and (joined := _INNER_BLANK.sub("", text)) != text:
        yield _normalise(joined)
    # Text written as a string literal, HTML or a URL's query (``\\"pw\\"``, ``&quot;pw&quot;``,
    # ``%26token%3D...``): the stretches around the escapes are read again as they were before.
    if ("\\" in text or "&" in text or "%" in text) and (stretches := _escaped_stretches(text)):
        yield _normalise(stretches)
    # A value continued on the next line: a shell command broken with ``\`` at the end of a line
    # (``curl ... \`` then ``-u id:secret``), a YAML block scalar (``password: |`` and the value
    # indented below it), an assignment whose literal a formatter moved to the next line
    # (``const apiKey =`` then ``"..."``). Read once more with the break as a blank.
    # Only the stretches around the breaks are read again, as with escapes.
    if "\n" in text and ("\\" in text or "|" in text or ">" in text or "=" in text):
        breaks = [found for found in _LINE_BREAK_IN_VALUE.finditer(text) if _break_in_value(text, found)]
        if breaks:
            yield _normalise(_stretches(text, breaks, _join_breaks, JOINED_CONTEXT))


_LINE_BREAK_IN_VALUE = re.compile(
    r"\\\r?\n[ \t]*|(?P<block>:[ \t]*[|>][-+]?[1-9]?)[ \t]*\r?\n[ \t]+(?=\S)"
    r"|(?P<assign>(?<![=!<>])=)[ \t]*\r?\n[ \t]+(?=[\"'`])"
)
# A block scalar or a moved literal is read again only after a name with a credential's word in it
# (``db_password: |``, ``const apiKey =``); a continued command always.
_CREDENTIAL_NAME_BEFORE = re.compile(r"(?i:pass|pwd|secret|token|key|credential|auth)[\w.-]*[\"'\]]?[ \t]*$")


def _break_in_value(text: str, found: re.Match[str]) -> bool:
    if found.group("block") is None and found.group("assign") is None:
        return True
    return _CREDENTIAL_NAME_BEFORE.search(text, max(0, found.start() - 60), found.start()) is not None


JOINED_CONTEXT = 160


def _joined_break(match: re.Match[str]) -> str:
    if match.group("block"):
        return ": "
    return "= " if match.group("assign") else " "


def _join_breaks(stretch: str) -> str:
    return _LINE_BREAK_IN_VALUE.sub(_joined_break, stretch)


_ESCAPES = {'\\"': '"', "\\'": "'", "\\t": "\t"}
_ESCAPE = re.compile(r"\\[\"'t]")
# Only the characters that delimit a credential in a query or a literal (``=``, ``&``, ``"``, ``'``).
_PERCENT = re.compile(r"%(?:3[Dd]|2[267])")
_HTML_ENTITY = re.compile(r"&(?:quot|apos|lt|gt|amp|#x?[0-9A-Fa-f]{2,4});")
_ESCAPED = re.compile(rf"{_ESCAPE.pattern}|{_HTML_ENTITY.pattern}|{_PERCENT.pattern}")
# How far around an escape its stretch reaches (then on to the end of a word): a credential's name
# and its value sit within it.
ESCAPED_CONTEXT = 120


def _escaped_stretches(text: str) -> str:
    """The stretches of `text` around its escapes, unescaped (see `_stretches`)."""
    return _stretches(text, _ESCAPED.finditer(text), _unescape, ESCAPED_CONTEXT)


def _stretches(
    text: str, found: Iterable[re.Match[str]], transform: Callable[[str], str], context: int
) -> str:
    """The stretches of `text` around what was `found`, each passed through `transform`, one a line;
    a stretch that does not start a line of `text` starts with ``~ `` (it is not the start of a
    config line)."""
    spans: list[tuple[int, int]] = []
    for hit in found:
        start = max(0, hit.start() - context)
        end = min(len(text), hit.end() + context)
        while start > 0 and not text[start - 1].isspace() and hit.start() - start < 2 * context:
            start -= 1
        while end < len(text) and not text[end].isspace() and end - hit.end() < 2 * context:
            end += 1
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
    return "\n".join(
        ("" if start == 0 or text[start - 1] == "\n" else "~ ") + transform(text[start:end])
        for start, end in spans
    )


def _unescape(text: str) -> str:
    if '\\"' in text or "\\t" in text or "\\'" in text:
        text = _ESCAPE.sub(lambda m: _ESCAPES[m.group()], text)
    if "&" in text and _HTML_ENTITY.search(text):
        text = html.unescape(html.unescape(text))
    if "%" in text and _PERCENT.search(text):
        text = urllib.parse.unquote(text)
    return text


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
    "fake",
    "sample",
    "xxxx",
    "****",
    "...",
    "\u2026",
    "replace",
    "insert",
)
# Credential words inside a value made only of words (``my-secret-token``, ``password``) also mark a
# stand-in, except on a command line: there the value after ``-p`` is the password as typed
# (``sshpass -p secret``). With a digit or a symbol beside the word (``MySecret2024!``) it is a password.
_CREDENTIAL_WORD_MARKERS = ("password", "passwort", "secret", "token")
_WORDS_ONLY = re.compile(r"[A-Za-z]+(?:[-_. ][A-Za-z]+)*")
# Template syntax marks a stand-in only as a whole construct: ``<your-password>``, ``${DB_PASSWORD}``,
# ``{{ .Values.password | b64enc }}``, ``$(cat /run/secrets/db)``, ``%(pw)s``. Inside braces stands an
# expression (names, dots, pipes, quotes, calls), so ``m{{h}o)p${e]nob(ody[...}}`` is a password full
# of symbols, not a template. A lone ``<``, ``>`` or ``$(`` is a character of a password.
_TEMPLATE_EXPRESSION = r"""[\w\s.:|'"()\[\]/,@*?=+-]*"""
_TEMPLATE = re.compile(
    r"^<|>$|<[A-Za-z][A-Za-z0-9_ .-]*>"
    rf"|\{{\{{{_TEMPLATE_EXPRESSION}\}}\}}|\$\{{{_TEMPLATE_EXPRESSION}\}}|\$\([^)]*\)|%\([^)]*\)"
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
_SNAKE_WORDS = re.compile(r"[a-z]+(?:[_-][a-z]+)+")
_DOTTED_NAME = re.compile(r"[a-z_][a-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_PATH_LIKE = re.compile(
    r"(?:[/~]|\.{1,2}/|[A-Za-z]:\\|file:)|.*\.(?:pem|key|json|ya?ml|txt|env|crt|cer|p12|pfx|jks|ppk|pub)$",
    re.IGNORECASE,
)
# ``ENC[AES256_GCM,...]`` is a value that SOPS encrypted.
_REFERENCE_MARKERS = (
    "://",
    "os.environ",
    "getenv",
    "env(",
    "env[",
    "secrets.",
    "vault:",
    "secretkeyref",
    "enc[",
)
_HYPHEN_WORDS = re.compile(r"[A-Za-z0-9.]+(?:-[A-Za-z]{3,})+")
_CAMEL_TOKENS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
_ALNUM_RUNS = re.compile(r"[A-Za-z0-9]+")
_HEX_ONLY = re.compile(r"[0-9a-fA-F]+")
_TOKEN_SEPARATORS = re.compile(r"[-_.~+/=]")
# A reference to a value kept elsewhere, by how it starts: ``$NAME``, ``${NAME}``, ``$(command)``,
# ``%NAME%``, ``@Microsoft.KeyVault(...)``, YAML anchors; and calls (``os.getenv("X")``). A password
# that merely starts with ``$`` or holds a ``(`` is not one.
_REFERENCE_START = re.compile(
    r"\$\{|\$\(|\$[A-Za-z_]\w*$|\$env:\w+$|%[A-Za-z_]\w*%$|%\(|@[A-Za-z]|[&*][A-Za-z_]\w*$"
)
_CALL = re.compile(r"[A-Za-z_][\w.:]*[(\[]")
# A replacement field of an f-string, ``str.format`` or C# interpolation as the whole value
# (``{db_password}``, ``{_github_pat(name)}``): the value is computed where the text is run.
_FORMAT_FIELD = re.compile(r"\{[A-Za-z_][\w.]*(?:\([\w\s.,'\"]*\))?(?:![rsa])?(?::[^{}\s]*)?\}")
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


def _markers(markers: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(
        "|".join(
            re.escape(form)
            for marker in markers
            for form in sorted({marker, marker.upper(), marker.capitalize()})
        )
    )


_STAND_IN_MARKERS = _markers(_PLACEHOLDER_MARKERS)
_CREDENTIAL_WORDS = _markers(_CREDENTIAL_WORD_MARKERS)


class _Markers:
    """What marks a value as a stand-in: marker words and templates, and, unless ``typed`` (a
    command line), a credential word in a value made only of words."""

    def __init__(self, *, typed: bool) -> None:
        self.typed = typed

    def search(self, value: str) -> bool:
        if _STAND_IN_MARKERS.search(value) is not None or _TEMPLATE.search(value) is not None:
            return True
        return (
            not self.typed
            and _WORDS_ONLY.fullmatch(value) is not None
            and (_CREDENTIAL_WORDS.search(value) is not None)
        )


_MARKERS = _Markers(typed=False)
_TYPED_MARKERS = _Markers(typed=True)


_BASE64_VALUE = re.compile(r"[A-Za-z0-9+/]{4,}={0,2}")


def _is_placeholder(value: str, markers: _Markers = _MARKERS) -> bool:
    lowered = value.lower()
    if lowered in _PLACEHOLDER_VALUES or len(set(lowered)) <= 2 or _MASK_ONLY.fullmatch(value):
        return True
    if markers.search(value):
        return True
    # Kubernetes Secret data is base64: ``api-key: bW1rXzNmOWEuLi4=`` is "mmk_3f9a..." in a manual.
    if len(value) % 4 == 0 and _BASE64_VALUE.fullmatch(value):
        try:
            decoded = base64.b64decode(value, validate=True).decode("ascii")
        except (binascii.Error, ValueError):
            return False
        return decoded.isprintable() and markers.search(decoded)
    return False


def _is_reference(value: str) -> bool:
    """A name that points at a secret kept elsewhere (env var, attribute, call, path, URL)."""
    if _REFERENCE_START.match(value) or _CALL.match(value):
        return True
    if value.startswith("{") and _FORMAT_FIELD.fullmatch(value):
        return True
    if _ENV_NAME.fullmatch(value) or _SNAKE_WORDS.fullmatch(value):
        return True
    # A dotted name is an attribute (``settings.db_password``), unless a part of it mixes cases and
    # digits as a password does (``n83.bat47Fy4``).
    if _DOTTED_NAME.fullmatch(value):
        return not any(all(_classes(part)[:3]) for part in value.split("."))
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


def _looks_random_lowercase(value: str) -> bool:
    """A lowercase-and-digits token (``qpmfdepfl01y7hzo...``): `_looks_random` in one case, or, when
    digits are scarce, few vowels. Random base36 letters are one-seventh vowels, words two-fifths: on
    32-character samples this finds 99.4% of random tokens instead of 96.6%, and lets through 21% of
    words run together with two to six digits instead of 18%."""
    if not value.islower():
        return False
    if _looks_random(value, mixed_case=False):
        return True
    if len(value) < 24 or _HEX_ONLY.fullmatch(value) or len(_DIGIT.findall(value)) < 2:
        return False
    letters = [c for c in value if c.isalpha()]
    vowels = sum(c in "aeiou" for c in letters)
    if vowels > 0.25 * len(letters) or _shannon_entropy(value) < MIN_ENTROPY_BITS:
        return False
    return max((len(run) for run in _ALNUM_RUNS.findall(value)), default=0) >= MIN_ALNUM_RUN


def _opaque_token(value: str) -> bool:
    """A bearer token: random in mixed case, or in one case with digits (hex excluded)."""
    if _is_placeholder(value):
        return False
    # Separators are part of the alphabet of base64url tokens; they say nothing about randomness.
    joined = _TOKEN_SEPARATORS.sub("", value)
    return _looks_random(joined) or _looks_random(joined.lower(), mixed_case=False)


# Characters that redact: a vendor's format filled with one of them is a mask (``AKIAXXXXXXXXXXXXXXXX``,
# ``glpat-xxxxxxxxxxxxxxxxxxxx``, ``sk-****``, ``0000...``) and passes.
_MASK_CHARACTERS = frozenset("*xX#.-_\u2022\u00b70?")


def _test_key(value: str) -> bool:
    """A key's place filled with a repeated pattern that does not redact: one character
    (``AKIAZZZZZZZZZZZZZZZZ``, ``hvb.bbbb...``, ``BBDC-1111...``) or a unit of up to 12
    (``abcd1234abcd1234...``, ``abcdefghijabcdefghij...``): a test key. It is refused like a real one:
    it has a real key's shape, every scanner downstream flags a copy, and an agent that reads it in a
    memory pastes it into code."""
    if len(value) < 16:
        return False
    for unit in range(1, min(12, len(value) // 2) + 1):
        pattern = value[:unit]
        if (
            not set(pattern) <= _MASK_CHARACTERS
            and (pattern * (len(value) // unit + 1))[: len(value)] == value
        ):
            return True
    return False


# Marker words that a vendor's documentation appends to a real-looking key (``...EXAMPLE``), as
# opposed to the masks and ellipses that hide one (``xxxx``, ``****``, ``...``).
_WORD_MARKERS = _markers(tuple(m for m in _PLACEHOLDER_MARKERS if m.isalpha() and m != "xxxx"))
# What is left of a key beside such a word must be this long and random to still be a key.
MIN_KEY_BESIDE_MARKER = 24
# Four or more redacting characters in a row: a key masked in part (``sk_live_51H8...xxxx``).
_MASK_CHARACTER_RUN = re.compile(r"([xX*#.?\u2022])\1{3}")


def _key_beside_marker(value: str) -> bool:
    """A random key with a marker word in it (``lin_api_<32 random>EXAMPLE``): the rest is still a
    key, and every scanner downstream flags it, as it flags AWS's documented examples."""
    if _TEMPLATE.search(value) is not None or _MASK_CHARACTER_RUN.search(value) is not None:
        return False
    rest = _WORD_MARKERS.sub(" ", value)
    return any(len(run) >= MIN_KEY_BESIDE_MARKER and _looks_random(run) for run in _ALNUM_RUNS.findall(rest))


def _varied(value: str) -> bool:
    """For vendor tokens whose prefix already says "secret": reject masks and stand-ins only."""
    if _test_key(value):
        return True
    if len(set(value)) < 8:
        return False
    return not _is_placeholder(value) or (
        _WORD_MARKERS.search(value) is not None and _key_beside_marker(value)
    )


# A token's prefix with nothing after it (``CFPAT-``, ``sk_live_``): where a key goes, not a key.
_PREFIX_STUB = re.compile(r"[A-Za-z]+(?:[-_][A-Za-z]+)*[-_]")
# A label, as a UI's strings hold them after a password's key: letters of any script, then a colon,
# not starting in lowercase (``"one_time_password": "Engangskode:"``, ``"password": "Пароль:"``;
# ``"application:" + key`` starts a credential).
_UI_LABEL = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*:")


def _ui_label(value: str) -> bool:
    return value[-1] == ":" and not value[0].islower() and _UI_LABEL.fullmatch(value) is not None


def _assigned_value_is_secret(value: str) -> bool:
    """The value of an explicit assignment (``password=...``, or a quoted value)."""
    if len(value) < 6 or any(c.isspace() for c in value) or _PREFIX_STUB.fullmatch(value):
        return False
    if _ui_label(value):
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


# Technical terms that have letters and digits but are not passwords ("hashed with SHA256").
_TECH_TERM = re.compile(
    r"(?i:sha|md|aes|rsa|dsa|ecdsa|ed|argon|pbkdf|scrypt|utf|base|crc|hmac|hs|rs|es|ps|x|tls|ssl|ipv|http|"
    r"oauth|fido|totp|hotp|ntlm|v)[-_]?\d+[a-z]*|\d+[A-Za-z]{1,10}"
)
_VERSION = re.compile(r"v?\d+(?:\.\d+)+[\w.-]*")
_PASSWORD_SYMBOL = re.compile(r"[!#$%&*+=?@^~|]")


def _password_like(value: str, markers: _Markers = _MARKERS) -> bool:
    """A value right after a password word in prose ("Passwort: Sommer2024", "the pw is hunter2").

    Weaker than `_credential_like` because the word already says "password": 6+ characters with a
    letter and a digit, or a symbol inside (a YAML tag such as ``!vault`` starts with one); not a
    technical term (``SHA256``, ``Argon2id``, ``12chars``) or a version.
    """
    if len(value) < 6 or _is_placeholder(value, markers) or _is_reference(value):
        return False
    if _HYPHEN_WORDS.fullmatch(value) or _TECH_TERM.fullmatch(value) or _VERSION.fullmatch(value):
        return False
    lower, upper, digit, _ = _classes(value)
    return (lower or upper) and (digit or _PASSWORD_SYMBOL.search(value, 1, len(value) - 1) is not None)


def _typed_password(value: str) -> bool:
    """The value of a password flag on a command line: anything but a stand-in, a reference or a flag.

    Words count here (``sshpass -p secret``): on a command line they are the password as typed. A
    word in capitals (``htpasswd -b FILE USER PASSWORD``) is the metavariable of a usage line.
    """
    if len(value) < 5 or value.startswith("-") or _is_reference(value) or _METAVARIABLE.fullmatch(value):
        return False
    return not _is_placeholder(value, _TYPED_MARKERS)


_METAVARIABLE = re.compile(r"[A-Z][A-Z_]*[`'\"]?")


_TRAILING_PUNCT = ".,;:!?)]}"


def _unquote(raw: str) -> tuple[str, bool]:
    """Strip quotes (returns the value and whether it was quoted) or trailing sentence punctuation."""
    if raw.startswith('@"'):
        raw = raw[1:]
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'`":
        return raw[1:-1].strip(), True
    # An unquoted value inside an element ends where its closing tag starts (``pw:X</Value>``).
    if "</" in raw:
        raw = raw[: raw.index("</")]
    return raw.rstrip(_TRAILING_PUNCT), False


# ---------------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------------

_Check = Callable[["re.Match[str]"], bool]


def _always(_: re.Match[str]) -> bool:
    return True


@dataclass(frozen=True)
class _Rule:
    """One detector. Speed matters (every save runs all of them), hence the four optional fields.

    ``hints``: lowercase substrings, one of which the text must contain for the pattern to be worth
    running. ``anchors``: lowercase substrings at which every match starts; the pattern is then tried
    only at their positions (found with `str.find`) instead of being searched for. Patterns that
    begin with an alternation of many words (``passwort|mot de passe|senha|...``) are searched for
    slowly, about 100 µs per 2,000 characters each; anchored, they cost a few µs. ``not_after``: characters that must not come right before a match; checked here rather
    than with a look-behind because a pattern that starts with a literal is searched for far faster.
    ``exact``: set for rules about words in any case (``Password``, ``API_KEY``): `pattern` is then
    searched in the lowercased text, five to ten times faster than a case-insensitive search, and
    `exact` (the same pattern, case-insensitive) re-reads each hit from the original text so that
    the value keeps its case.
    ``in_tokens``: every match lies inside a run of 20+ token characters (`_TOKEN_RUN`, found once
    per text); the pattern is searched only there, and its anchors are looked for only where such
    a run or a part of it (after ``=``, ``.``, ``/``, ...) starts: a table of a hundred vendor
    prefixes then costs a few µs instead of a hundred substring searches.
    """

    kind: str
    pattern: re.Pattern[str]
    check: _Check = _always
    hints: tuple[str, ...] = ()
    not_after: str = ""
    exact: re.Pattern[str] | None = None
    anchors: tuple[str, ...] = ()
    in_tokens: bool = False


def _any_case(
    kind: str,
    source: str,
    check: _Check,
    hints: tuple[str, ...] = (),
    not_after: str = "",
    anchors: tuple[str, ...] = (),
) -> _Rule:
    """A rule whose lowercase `source` is matched regardless of case (see `_Rule.exact`)."""
    return _Rule(
        kind, re.compile(source), check, hints, not_after, re.compile(source, re.IGNORECASE), anchors
    )


def _value(test: Callable[[str], bool]) -> _Check:
    """A check that applies `test` to the pattern's ``v`` group."""

    def check(match: re.Match[str]) -> bool:
        return test(match.group("v"))

    return check


def _json_object(segment: str) -> dict[str, object] | None:
    """A base64url segment of a JWT decoded to its JSON object, or None."""
    try:
        decoded = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (binascii.Error, ValueError):
        return None
    return decoded if isinstance(decoded, dict) else None


def _jwt(match: re.Match[str]) -> bool:
    """A JWT: a header with ``alg``; without a signature (an unsecured token, ``"alg": "none"``, or a
    signed one cut short) the payload must decode to a JSON object as well."""
    header = _json_object(match.group("h"))
    if header is None or "alg" not in header:
        return False
    return match.group("s") is not None or _json_object(match.group("p")) is not None


def _basic_auth_decodes(match: re.Match[str]) -> bool:
    try:
        decoded = base64.b64decode(match.group("v"), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    user, sep, password = decoded.partition(":")
    return bool(sep and user) and len(password) >= 4 and not _is_placeholder(password)


def _url_password(password: str) -> bool:
    return len(password) >= 4 and not _is_placeholder(password) and not _is_reference(password)


_SCHEME_CHARACTERS = frozenset(string.ascii_letters + string.digits + "+.-")


def _url_userinfo(match: re.Match[str]) -> bool:
    """The password of ``scheme://user:password@host``. A URL in quotes ends at the closing quote:
    in ``"https://host:8000";@user`` the ``@`` is outside the URL, and there is no password."""
    text, start = match.string, match.start()
    while start > 0 and text[start - 1] in _SCHEME_CHARACTERS:
        start -= 1
    opening = text[start - 1] if start > 0 else ""
    password = match.group("v")
    if opening in "\"'`" and opening and opening in password:
        return False
    return _url_password(password)


_COMPARISONS = frozenset({"==", "!=", "===", "!=="})
_COMPARED_NAMES = r"passwor[dt]|passwd|pwd|pass|secret|token|(?:api|private|secret|access)_?key"


# A passphrase: four to eight words in quotes (diceware counts four or more), 20+ characters, none
# of them a credential word (``password = "correct horse battery staple"``; not ``password = "enter
# your password"``, and not a message of three words, ``"doesnt start right"``).
_PASSPHRASE = re.compile(r"[^\s\"'`]+(?: [^\s\"'`]+){3,7}")


def _passphrase(value: str) -> bool:
    return (
        len(value) >= 20
        and _PASSPHRASE.fullmatch(value) is not None
        and not _is_placeholder(value)
        and _CREDENTIAL_WORDS.search(value) is None
    )


def _config_value(value: str) -> bool:
    """An unquoted value after the colon of a compound name (``auth_token: q8w7e6r5t4y3u2i1``): YAML,
    not prose, so 8+ characters with a letter and a digit or a symbol inside are enough."""
    return len(value) >= 8 and _password_like(value)


def _assignment(after_colon: Callable[[str], bool], *, passphrase: bool = False) -> _Check:
    """An assignment: explicit (``=``) and quoted values need `_assigned_value_is_secret`; after an
    unquoted colon, which prose uses too, the value must pass `after_colon`, or `_config_value` when
    the name is compound (``client_secret``, ``db.token``, ``authToken``: no sentence names a thing
    so). With `passphrase`, a quoted value of words after ``=`` (not after a colon: JSON and YAML hold
    messages that way, ``{"password": "too short"}``) is a passphrase."""

    def check(match: re.Match[str]) -> bool:
        value, quoted = _unquote(match.group("v"))
        # A call or index right after the value (``password=get_secret("db")``) is a reference.
        if not quoted and match.end() < len(match.string) and match.string[match.end()] in "([":
            return False
        separator = match.group("sep")
        # A comparison with a literal is a hard-coded credential (``if (password == "...")``); with
        # anything else it compares two variables.
        if separator in _COMPARISONS:
            return quoted and _assigned_value_is_secret(value)
        if quoted or separator != ":":
            if passphrase and quoted and separator != ":" and _passphrase(value):
                return True
            return _assigned_value_is_secret(value)
        start = match.start()
        compound = start > 0 and (match.string[start - 1].isalnum() or match.string[start - 1] in "_-.")
        return after_colon(value) or (compound and _config_value(value))

    return check


_strong_password_assignment = _assignment(_password_like, passphrase=True)

# A plain word assigned to a password's name is the password (``password: letmein``,
# ``DB_PASSWORD=tiger``, ``<password>mavenpass</password>``) unless it stands for one: a status, a
# type or a code name in a value's place, a password word in some language, credential words alone.
MIN_PLAIN_PASSWORD = 4
_NOT_A_PASSWORD = frozenset(
    {
        "yes", "on", "off", "ok", "okay", "enabled", "disabled", "enable", "disable", "blank", "set",
        "plain", "plaintext", "cleartext", "text", "bytes", "int", "integer", "number", "bool", "boolean",
        "char", "varchar", "object", "any", "secretstr", "field", "input", "prompt", "ask", "stdin",
        "env", "environ", "environment", "file", "vault", "keychain", "keyring", "random", "auto",
        "manual", "inherit", "same", "different", "invalid", "valid", "incorrect", "wrong", "weak",
        "strong", "reset", "change", "update", "save", "submit", "login", "logout", "signin", "signup",
        "register", "cancel", "show", "hide", "toggle", "visible", "invisible", "self", "cls", "this",
        "args", "kwargs", "data", "result", "val", "values", "entry", "line", "param", "params",
        "options", "opts", "config", "conf", "settings", "creds", "credential", "credentials", "auth",
        "users", "payload", "body", "form", "request", "response", "row", "record", "item", "obj", "arg",
        "raw", "salt", "hash", "digest", "crypt", "bcrypt", "argon", "secure", "insecure", "unique",
        "length", "minlength", "maxlength", "pattern", "regex", "type", "label", "hint", "confirm",
        "confirmation", "repeat", "verify", "current", "previous", "old", "new", "temporary", "temp",
        "tmp", "forgot", "lost", "demo", "changeit", "here", "there", "below", "above", "later", "soon",
        "pending", "todo", "fixme", "ignore", "ignored", "skip", "never", "always", "sometimes", "once",
        "mine", "yours", "ours", "theirs", "same_as_above", "see", "ditto", "dummy", "fake", "sample",
        "example", "mask", "secret", "password", "token", "none", "null", "nil", "void", "undef", "word",
    }
)  # fmt: skip
# A participle or adjective stands for a state: ``expired``, ``missing``, ``configurable``.
_STATUS_WORD = re.compile(r"[a-z]{2,}(?:ed|ing|able|ible|ly)")
_FILLERS = r"(?:my|your|our|the|a|an|new|old|some|super|top|very|default|strong|secure|own|real|actual)"
_CREDENTIAL_PARTS = r"(?:passwor[dt]|passwd|pwd|pass|secret|token|key|passphrase|pw)"
_ONLY_CREDENTIAL_WORDS = re.compile(
    rf"(?:{_FILLERS}[-_. ]?)*{_CREDENTIAL_PARTS}(?:[-_. ]?(?:{_CREDENTIAL_PARTS}|here|goes|value|s))*"
)
_CREDENTIAL_PART = re.compile(_CREDENTIAL_PARTS)
# What may follow an unquoted value on its line: nothing, a comment, the next field's separator, or
# the next ``name=`` (``user=app password=X host=db``, libpq's and a log line's form).
_VALUE_ENDS_LINE = re.compile(r"[ \t]*(?:[#;&,}\])]|//|\r?$)|[ \t]+[A-Za-z_][\w.-]*=", re.MULTILINE)
# What may stand before a YAML-style ``name: value`` on its line: indentation, a list's dash, a quote
# or an inline mapping's brace; prose puts words there.
_CONFIG_LINE_START = re.compile(r"[ \t]*(?:[-*][ \t]+)?[\"']?|.*\{[ \t]*[\"']?|.*,[ \t]*[\"']?(?=$)")


def _plain_password(value: str) -> bool:
    """A single token in a password's place that does not stand for one (see `_NOT_A_PASSWORD`)."""
    if not MIN_PLAIN_PASSWORD <= len(value) <= 100 or any(c.isspace() for c in value):
        return False
    if value[0] in ":?@&*%$<{[(\\.,;=+-" or sum(c.isalnum() for c in value) < MIN_PLAIN_PASSWORD:
        return False
    if _ui_label(value):
        return False
    if _is_placeholder(value, _TYPED_MARKERS) or _is_reference(value):
        return False
    lowered = value.lower()
    if (
        lowered in _NOT_A_PASSWORD
        or _STATUS_WORD.fullmatch(lowered)
        or _ONLY_CREDENTIAL_WORDS.fullmatch(lowered)
    ):
        return False
    if _PASSWORD_WORD_ALONE.fullmatch(lowered) or _TECH_TERM.fullmatch(value) or _VERSION.fullmatch(value):
        return False
    return not _PREFIX_STUB.fullmatch(value) and not _EMAIL.fullmatch(value)


_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


def _plain_password_assigned(match: re.Match[str]) -> bool:
    """A plain word assigned to a password's name: quoted, or unquoted and ending its line or field
    (``password=tiger;``, ``password: kittens`` at the start of a line: a config, not a sentence)."""
    raw, separator = match.group("v"), match.group("sep")
    value, quoted = _unquote(raw)
    # Compared with a literal, the literal is the password (``if password == 'logmein':``).
    if separator in _COMPARISONS and not quoted:
        return False
    if not quoted:
        text, end = match.string, match.end()
        if (
            raw.endswith(".")
            or (end < len(text) and text[end] in "([.")
            or _CREDENTIAL_PART.search(value.lower())
        ):
            return False
        if _VALUE_ENDS_LINE.match(text, end) is None:
            return False
        if separator == ":":
            line_start = text.rfind("\n", 0, match.start()) + 1
            name_start = _name_start(text, match.start(), "_-.")
            if _CONFIG_LINE_START.fullmatch(text, line_start, name_start) is None:
                return False
    return _plain_password(value)


# A PowerShell cmdlet's name as the value (``$Password = Read-Host -AsSecureString``): the password
# is what the command returns. ``ConvertTo-SecureString '<literal>' -AsPlainText`` has its own rule.
_POWERSHELL_CMDLET = re.compile(
    r"(?:Get|Read|New|Import|Export|Invoke|Select|Receive|Request|Resolve|Find|Unprotect|ConvertFrom|ConvertTo)"
    r"-[A-Z][A-Za-z]+"
)


# A Rails route: a path with a password segment mapped to a controller's action
# (``get "/password/new" => "passwords#new"``); the word names a page, the value an action.
_ROUTE_TARGET = re.compile(r"""(["'])[a-z][a-z0-9_]*(?:/[a-z][a-z0-9_]*)*#[a-z_][a-z0-9_]*[?!]?\1""")


def _not_a_route(check: _Check) -> _Check:
    def checked(match: re.Match[str]) -> bool:
        start = match.start()
        if start and match.string[start - 1] == "/" and _ROUTE_TARGET.fullmatch(match.group("v")):
            return False
        return check(match)

    return checked


def _password_assignment(match: re.Match[str]) -> bool:
    # ``MYSQLPASS``, ``SMTPPASS``: ``pass`` glued to a name counts in a name in capitals only
    # (``bypass``, ``compass`` are words).
    start, text = match.start(), match.string
    if (
        start
        and text[start - 1].isalpha()
        and text[start : start + 4].lower() == "pass"
        and not text[start + 4 : start + 5].isalpha()
    ):
        name = text[_name_start(text, start) : start + 4]
        if not name.isupper():
            return False
    if _POWERSHELL_CMDLET.fullmatch(match.group("v")):
        return False
    return _strong_password_assignment(match) or _plain_password_assigned(match)


_credential_assignment = _assignment(_credential_like)
# An AWS Secrets Manager ARN names a secret, it does not hold it: ``arn:aws:secretsmanager:<region>:
# <account>:secret:prod/db-AbC123`` ends in the secret's name and six random characters of AWS's.
_SECRETS_MANAGER_ARN = re.compile(r"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]*:[0-9]{12}:\Z")


# An identifier in lower camelCase (``iamRoleStatements``, ``rdsMasterCredentials``): the value of a
# dependency injection token or a secret's name, not a secret. Each part of four or more letters has a
# vowel (shorter ones may be abbreviations: ``rds``, ``jwt``).
_CAMEL_IDENTIFIER = re.compile(r"[a-z]{2,}(?:[A-Z][a-z]{2,}){1,5}")
_CAMEL_PART = re.compile(r"[A-Z]?[a-z]+")


def _camel_identifier(value: str) -> bool:
    return _CAMEL_IDENTIFIER.fullmatch(value) is not None and all(
        len(part) < 4 or any(vowel in part for vowel in "aeiouy") for part in _CAMEL_PART.findall(value)
    )


def _token_assignment(match: re.Match[str]) -> bool:
    start = match.start()
    if _SECRETS_MANAGER_ARN.search(match.string, max(0, start - 80), start):
        return False
    if _camel_identifier(_unquote(match.group("v"))[0]):
        return False
    return _credential_assignment(match)


# "key" alone is too common a name (``key=value``, ``sort key:``); it counts right after a qualifier.
# Written as look-behinds (each of fixed width), so that a bare "key" fails at once.
_KEY_QUALIFIERS = (
    "api", "access", "secret", "private", "signing", "encryption", "master", "client", "auth", "app",
    "account", "hmac", "webhook",
)  # fmt: skip
_QUALIFIED_KEY = "(?:" + "|".join(f"(?<={q})|(?<={q}[ _-])" for q in _KEY_QUALIFIERS) + ")key"


def _curl_user(match: re.Match[str]) -> bool:
    """``-u user:password`` on a curl command line."""
    line_start = match.string.rfind("\n", 0, match.start()) + 1
    if _CURL.search(match.string, line_start, match.start()) is None:
        return False
    value = match.group("v")
    return _assigned_value_is_secret(value) or _plain_password(value)


def _prose_value(unquoted: Callable[[str], bool], *, plain_quoted: bool = False) -> _Check:
    """The value in "the password is X": quoted values are explicit, unquoted ones pass `unquoted`.
    With `plain_quoted`, a plain word in quotes (not backticks) counts as well: "the default password
    for the user is 'pyne'"."""

    def check(match: re.Match[str]) -> bool:
        value, quoted = _unquote(match.group("v"))
        if not quoted:
            return unquoted(value)
        # In prose, a name in backticks is code being named (``ApiKey caps its requests:
        # `requestsPerMinute```), not a value.
        if match.group("v").startswith("`"):
            return not _WORDS_ONLY.fullmatch(value) and _assigned_value_is_secret(value)
        return _assigned_value_is_secret(value) or (plain_quoted and _plain_password(value))

    return check


# A command starts a line (after a prompt) or follows a pipe, ``;``, ``&&``, a backtick, ``$(``,
# ``sudo`` or a colon ("Run: sshpass -p ..."); or it opens a string literal given to a call or
# assigned (``system("psexec ...")``, ``cmd = 'mysql ...'``), or follows Windows' ``cmd /c`` or
# ``start``.
_COMMAND_START = re.compile(
    r"(?:^|[`|;&(:]|\$|\bsudo|\benv|[(=,\[][ \t]*[\"']|\bcmd(?:\.exe)?[ \t]+/[ck]|\bstart)[ \t]*$",
    re.MULTILINE | re.IGNORECASE,
)


# A plain word after a flag followed by one of these is prose: "redis-cli -a option is deprecated".
_PROSE_AFTER = re.compile(
    r"[ \t]+(?i:is|are|was|were|and|or|the|a|an|for|to|in|of|with|instead|flag|option|ist|sind|und|oder|"
    r"est|et|ou|es|y|o|è|e|é)(?![\w-])"
)
_COMMAND_LINE = re.compile(r"[ \t]*(?:[$#>][ \t]+|`)?(?:sudo[ \t]+)?[a-z][a-z0-9._-]*[ \t]")


def _flag_value(match: re.Match[str]) -> tuple[str, bool]:
    """The value of a password flag, and whether it is a password whatever the context.

    A plain word (``secret``) is a password only on a command line; the callers decide that, so
    that "redis-cli -a option is deprecated" and "use --password instead" stay prose.
    """
    value, _ = _unquote(match.group("v"))
    if not _typed_password(value):
        return value, False
    return value, _password_like(value, _TYPED_MARKERS) or _credential_like(value)


def _cli_short_flag(match: re.Match[str]) -> bool:
    """``-p VALUE`` (and the like) after a tool that takes its password that way."""
    value, strong = _flag_value(match)
    if not _typed_password(value):
        return False
    text, flag_at = match.string, match.start()
    # A command longer than this is a paragraph, not a command line.
    command_start = max(flag_at - 160, *(text.rfind(c, 0, flag_at) + 1 for c in "\n|;&"))
    tools = list(_CLI_TOOLS.finditer(text, command_start, flag_at))
    tool = tools[-1] if tools else None
    if tool is None or tool.lastgroup is None:
        return False
    if not _CLI_TOOL_FLAGS[int(tool.lastgroup[1:])].fullmatch(match.group("flag")):
        return False
    if strong:
        return True
    if _PROSE_AFTER.match(text, match.end()):
        return False
    line_start = text.rfind("\n", 0, tool.start()) + 1
    return _COMMAND_START.search(text, max(line_start, tool.start() - 12), tool.start()) is not None


def _cli_long_flag(match: re.Match[str]) -> bool:
    """``--password VALUE`` or ``--db-password=VALUE``; a plain word only on a command line."""
    value, strong = _flag_value(match)
    if strong or not _typed_password(value) or _PROSE_AFTER.match(match.string, match.end()):
        return strong
    return _COMMAND_LINE.match(match.string, match.string.rfind("\n", 0, match.start()) + 1) is not None


def _pem_body(body: str) -> bool:
    """What a BEGIN/END private-key frame holds is a key unless it is a stand-in."""
    compact = re.sub(r"(?:\\[nr]|\s)+", " ", body).strip()
    if len(_ALNUM_ONLY.sub("", compact)) < 8:
        return False
    return _STAND_IN_MARKERS.search(compact) is None and _TEMPLATE.search(compact) is None


_ALNUM_ONLY = re.compile(r"[^A-Za-z0-9]")


def _base64_pem(match: re.Match[str]) -> bool:
    """Base64 whose first bytes decode to a PEM private-key header, with key material after it."""
    data = re.sub(r"\s", "", match.group())
    try:
        header = base64.b64decode(data[:64])
    except (binascii.Error, ValueError):
        return False
    return len(data) >= 120 and b"PRIVATE KEY" in header


def _pem_header(match: re.Match[str]) -> bool:
    """A private-key header followed by key material, or alone on its line at the end of the text."""
    if match.group("end") is not None:
        text, start = match.string, match.start()
        return not text[text.rfind("\n", 0, start) + 1 : start].strip()
    return match.group("v") is None or _varied(match.group("v"))


_CURL = re.compile(r"\bcurl\s")
_WORD = string.ascii_letters + string.digits + "_"
_WORD_DASH = _WORD + "-"
_B64 = r"[A-Za-z0-9+/]"

# Password words in English, German, French, Spanish, Portuguese, Dutch, Italian, Polish, Swedish,
# Danish and Norwegian, Finnish, Turkish, Czech and Russian. Italian says "password"; "parola" alone
# means "word" and "clave" is also "key": both count only as names (``clave: ...``), never in prose.
_PASSWORD_WORDS = (
    r"passwort|p(?:a?s{1,2})w(?:o?r)?d|pwd|passphrase|passcode|kennwort|mot[ _-]de[ _-]passe|mdp|contrase[ñn]a|senha|"
    r"palavra[ _-]passe|wachtwoord|parola[ _-]d['’]ordine|has[łl]o|l[öo]senord(?:et)?|adgangskode(?:n)?|"
    r"passord(?:et)?|salasana|[şs]ifre(?:si)?|heslo|пароль|κωδικ[όο]ς(?: πρόσβασης)?|συνθηματικό|"
    r"jelsz[óo]|jelszava|kata[ _-]sandi(?:nya)?|m[ậa]t[ _-]kh[ẩa]u"
)
_PASSWORD_NAMES = _PASSWORD_WORDS + r"|clave|parol[aă]|sshpass|pass|(?<![a-z])pw"
# A value that is itself a password word (an interface's label: ``password: Passwort``).
_PASSWORD_WORD_ALONE = re.compile(rf"(?:{_PASSWORD_WORDS}|clave|parol[aă])s?")
# Where each of the words above starts (see `_Rule.anchors`).
_PASSWORD_ANCHORS = (
    "pass", "kennwort", "mot", "mdp", "contrase", "senha", "palavra", "wachtwoord", "parola", "hasło",
    "haslo", "lösenord", "losenord", "adgangskode", "salasana", "şifre", "sifre", "heslo", "пароль", "pw",
    "clave", "κωδικ", "συνθηματικό", "jelsz", "kata", "mật", "parol", "sshpass", "psw", "pssw", "pasw",
)  # fmt: skip
# "the password for the router is X" in the languages above; "now" may follow the verb.
_PROSE_VERB = (
    r"(?:\s(?:is|was|ist|lautet|heißt|heisst|war|è|e|era|est|était|etait|es|é|foi|luidt|to|jest|är|ar|er|on|je"
    r"|είναι|adalah|là|este"
    r"|(?:changed|set|reset|updated)\s+to|geändert\s+(?:auf|in|zu)|changé\s+(?:en|pour)|cambiad[ao]\s+a"
    r"|alterad[ao]\s+para|gewijzigd\s+in)|\s?(?::|->|→|=>))\s+"
    r"(?:(?:now|jetzt|nun|ora|maintenant|ahora|agora|nu|teraz|nå|nyt)\s+)?"
    # "was changed to X": the value comes after the longer verb.
    r"(?!(?:changed|set|reset|updated|been|geändert|changé|cambiad[ao]|alterad[ao]|gewijzigd)\b)"
)
_PROSE_VALUE = r"""(?P<v>"[^"\n]{1,100}"|'[^'\n]{1,100}'|`[^`\n]{1,100}`|[^\s"'`,;]{1,100})"""
# Words for a secret or token in the same languages; "key" counts only with a qualifier
# (`_QUALIFIED_KEY`: "the signing key is X", not "the key fix is X").
_SECRET_NAMES = r"secret[oa]?|secrète|token|jeton|geheime sleutel|geheimnis|segredo|segreto|токен|секрет"
_SECRET_ANCHORS = ("key", "credential", "secr", "token", "jeton", "geheim", "segre", "токен", "секрет")
_DOCKERFILE_ENV = (
    rf"(?:env|arg)[ \t]+[a-z0-9_]*(?:{_PASSWORD_NAMES})(?![a-z0-9_=-])[ \t]+"
    r"""(?P<v>"[^"\n]{1,200}"|'[^'\n]{1,200}'|[^\s"'=][^\s"']{0,199})[ \t]*(?m:$)"""
)
_ECHO_STDIN = (
    r"""(?:echo|printf)[ \t]+(?:-[ne][ \t]+)?(?P<v>"[^"\n]{1,200}"|'[^'\n]{1,200}'|[^\s"'|]{1,200})[ \t]*\|"""
    r"""[^\n|]{0,120}?--password-stdin"""
)


# A setter or builder given a password literal (``ds.setPassword("...")``, ``.withPassword("...")``,
# ``builder.password("...")``), and a login or basic-auth call given a user and a password as two
# literals (``smtp.login("user", "...")``, ``HTTPBasicAuth("user", "...")``, ``auth=("user", "...")``).
_PASSWORD_SETTER = (
    r"""(?:(?:set|with|use)_?(?:passwor[dt]|passwd|pwd|passphrase)|(?<=\.)(?:password|passwd|passphrase))"""
    r"""[ \t]*\([ \t]*(?P<v>"[^"\n]{1,200}"|'[^'\n]{1,200}')[ \t]*\)"""
)
_LOGIN_CALL = (
    r"""(?:\.login|basicauth|\bauth[ \t]*=[ \t]*)[ \t]*\([ \t]*(?:"[^"\n]{1,200}"|'[^'\n]{1,200}')[ \t]*,"""
    r"""[ \t]*(?P<v>"[^"\n]{1,200}"|'[^'\n]{1,200}')[ \t]*\)"""
)
# A credential object built from literals: a user and a password (``new NetworkCredential("u",
# "...")``, ``PasswordAuthentication("u", "...".toCharArray())``, ``UsernamePasswordCredentials``),
# or a directory path, a user and a password (``new DirectoryEntry("LDAP://...", "u", "...")``,
# ``OpenDSObject``). The password is the last literal of the run; a domain may follow it.
_CREDENTIAL_CONSTRUCTOR = (
    r"""(?:credentials?|passwordauthentication|directoryentry|opendsobject)[ \t]*\([ \t]*"""
    r"""(?:(?:"[^"\n]{0,200}"|'[^'\n]{0,200}')[ \t]*,[ \s]*){1,2}(?P<v>"[^"\n]{1,200}"|'[^'\n]{1,200}')"""
    r"""(?=[ \t]*(?:[,)]|\.tochararray\(\)))"""
)


def _quoted_secret(raw: str) -> bool:
    """A literal (quoted or not) whose value is a secret."""
    return _assigned_value_is_secret(_unquote(raw)[0])


def _plain_or_strong(raw: str) -> bool:
    value = _unquote(raw)[0]
    return _assigned_value_is_secret(value) or _plain_password(value)


_NETRC = r"\bmachine[ \t]+[^\s]+(?:\s+(?:login|account)[ \t]+[^\s]+){0,2}\s+password[ \t]+(?P<v>[^\s]{1,200})"
_USER_SLASH_PASSWORD = re.compile(
    r"(?:login|credentials?|credenciai?s|credenciales|zugang(?:sdaten)?|anmeldedaten|identifiants|acceso|acesso)\b[^\n]{0,40}?[\s:]"
    r"[A-Za-z0-9._@-]{2,40}[ \t]*/[ \t]*(?P<v>[^\s/]{6,100})",
    re.IGNORECASE,
)
# Tools that take a password as a short flag, and how: the flag as typed (``-p`` followed by a space
# or not, ``-p`` with the value attached, ...). The rule is tried at every `` -`` of the text, and a
# flag counts only after its own tool in the same command (up to a pipe, ``;``, ``&`` or newline).
_CLI_PASSWORD_FLAGS: tuple[tuple[str, str], ...] = (
    (r"sshpass", r"-p[ \t]*"),
    (r"mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mysqlshow|mysqlsh|mariadb|mariadb-dump", r"-p"),
    (r"redis-cli", r"-a[ \t]+"),
    (r"mongo|mongosh|mongodump|mongorestore|mongoexport|mongoimport", r"-p[ \t]+"),
    (r"(?:docker|podman|buildah|skopeo|helm)[ \t]+(?:registry[ \t]+)?login", r"-p[ \t]+"),
    (r"ldap[a-z]+", r"-w[ \t]+"),
    (r"zip|unzip", r"-P[ \t]+"),
    (r"7z|7za|7zr|rar|unrar", r"-p"),
    (r"sqlcmd|bcp|ipmitool", r"-P[ \t]+"),
    (r"(?i:psexec|psexec64|paexec)(?:\.exe)?|rdesktop", r"-p[ \t]+"),
    # Windows remoting and audit tools that take ``-u USER -p PASSWORD`` the same way.
    (r"crackmapexec|cme|netexec|nxc|evil-winrm|smbmap|hydra|medusa", r"-p[ \t]+"),
    (r"smbclient|rpcclient|winexe|smbcacls|smbget|net", r"-U[ \t]+[^\s%]+%"),
    (r"openssl", r"-(?:pass(?:in|out|word)?|k)[ \t]+pass:"),
    (r"keytool|jarsigner", r"-(?:src|dest|new)?(?:store|key)?pass[ \t]+"),
)
_CLI_FLAG = re.compile(
    r"\s(?P<flag>-p[ \t]*|-[awP][ \t]+|-U[ \t]+[^\s%]+%|-(?:pass(?:in|out|word)?|k)[ \t]+pass:"
    r"|-(?:src|dest|new)?(?:store|key)?pass[ \t]+)"
    r"""(?P<v>'[^'\n]{1,200}'|"[^"\n]{1,200}"|[^\s'"]{1,200})"""
)
_CLI_TOOLS = re.compile(
    "|".join(f"(?P<t{i}>(?<![\\w-])(?:{tool})(?![\\w-]))" for i, (tool, _) in enumerate(_CLI_PASSWORD_FLAGS))
)
_CLI_TOOL_FLAGS = [re.compile(flag) for _, flag in _CLI_PASSWORD_FLAGS]
# Long flags of any tool: --password X, --db-password=X, --passphrase X.
# PowerShell and Java tools write them with one dash (``Connect-VIServer ... -Password X``).
_CLI_LONG_FLAG = re.compile(
    r"(?:--(?:[a-z0-9]+-)*(?:password|passwd|pass|pwd|passphrase)|-(?i:password|passwd|passphrase))(?:=|[ \t]+)"
    r"""(?P<v>'[^'\n]{1,200}'|"[^"\n]{1,200}"|[^\s'"]{1,200})"""
)
# The AWS documentation's example key pairs. Alone or in a config line they are refused like real
# keys: they are shaped like real keys, every scanner downstream (push protection, CI, log scrubbers)
# flags them, and a memory holding one teaches an agent to paste it into code. The key-id rule
# refuses any AKIA/ASIA id; these catch the secret halves, which otherwise read as placeholders
# ("EXAMPLE"). A text that names them as examples may hold them (`_DOCUMENTED_EXAMPLES`).
_AWS_DOCUMENTATION_SECRETS = (
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY",
)
# A quoted value may be long (a refresh token or a signed JWT runs to 1,000+ characters); it ends at
# its quote or the end of the line. C# writes verbatim strings as ``@"..."``.
_ASSIGNED_VALUE = (
    r"""(?P<v>@?"[^"\n]{0,2000}"|'[^'\n]{0,2000}'|`[^`\n]{0,2000}`|[^\s"'`,;@][^\s"'`,;]{0,1999})"""
)
# The name may carry any prefix (db_password, PGPASSWORD, x-api-key) but must end the key:
# ``password_policy=strict`` is not a password.
# A number may follow the name (``api_key2``, ``DB_PASSWORD_1``: one of several of the same kind),
# and so may the brackets of a C array (``char password[] = "..."``). A quoted name may close a
# subscript (``config['password'] = ...``, ``os.environ["API_KEY"] = ...``).
_NAME_END_AND_SEPARATOR = (
    r"""(?:[_-]?[0-9]{1,2})?(?![A-Za-z0-9_-])(?:\[[0-9]*\])?(?:["']\]?)?"""
    r"""[ \t]*(?P<sep>[!=]==?|:=|=>|=|:)[ \t]*"""
)

# A password's name may be plural (``passwords:``) and may carry a type before ``=`` (``passwd: str =
# "..."`` in Python, ``val password: String = "..."`` in Scala and Kotlin).
_PASSWORD_NAME_END = (
    r"""s?(?:[_-]?[0-9]{1,2})?(?![A-Za-z0-9_-])(?:\[[0-9]*\])?(?:["']\]?)?[ \t]*"""
    r"""(?::[ \t]*[a-z_][\w.]*(?:\[[\w., ]*\])?[ \t]*(?==))?(?P<sep>[!=]==?|:=|=>|=|:)[ \t]*"""
)


# Tokens of other services whose format starts with a prefix: the table of `secret_formats`,
# one rule per kind, tried only where a prefix occurs (`_Rule.anchors`).
def _prefix_rule(kind: str) -> _Rule:
    formats = [f for f in TOKEN_FORMATS if f.kind == kind]
    body = "|".join(f"{re.escape(f.prefix)}{f.body}" for f in formats)
    prefixes = tuple(sorted({f.prefix for f in formats}, key=len, reverse=True))

    def check(match: re.Match[str]) -> bool:
        value = match.group("v")
        prefix = next((p for p in prefixes if value.startswith(p)), "")
        return _varied(value) or _test_key(value[len(prefix) :])

    return _Rule(
        kind,
        re.compile(f"(?P<v>{body})(?![A-Za-z0-9_-])"),
        check,
        not_after=_WORD_DASH,
        anchors=tuple(sorted({f.prefix.lower() for f in formats})),
        in_tokens=True,
    )


# Tokens with a fixed shape but no prefix: Telegram bot tokens (``<bot id>:AA<33>``), Mailchimp API
# keys (32 hex, then the data centre: ``-us6``), found from their fixed middle part.
# Tableau personal access token secrets (16 bytes in base64, ``:``, 32 characters) and MaxMind
# license keys (``<6>_<29>_mmk``).
_TABLEAU = re.compile(r"(?<![A-Za-z0-9+/])(?P<v>[A-Za-z0-9+/]{22}==:[A-Za-z0-9]{32})(?![A-Za-z0-9])")
_MAXMIND = re.compile(r"(?<![A-Za-z0-9_-])(?P<v>[A-Za-z0-9]{6}_[A-Za-z0-9]{29})_mmk(?![A-Za-z0-9_-])")
_TELEGRAM = re.compile(r"(?P<v>\d{8,10}:AA[A-Za-z0-9_-]{33})(?![A-Za-z0-9_-])")
# A bot token whose secret does not open with ``AA`` (older bots, and Apprise's ``tgram://`` URLs):
# in a text that names Telegram.
_TELEGRAM_NAMED = re.compile(r":(?P<v>[A-Za-z0-9_-]{35})(?![A-Za-z0-9_-])")
_BOT_ID_BEFORE = re.compile(r"(?<![0-9])[0-9]{8,10}")


def _telegram_named(match: re.Match[str]) -> bool:
    """The secret after a bot id (8 to 10 digits, then the colon the match starts at)."""
    text, start = match.string, match.start()
    if not any(_BOT_ID_BEFORE.fullmatch(text, start - n, start) for n in (8, 9, 10) if start >= n):
        return False
    return _looks_random(_TOKEN_SEPARATORS.sub("", match.group("v")))


_MAILCHIMP = re.compile(r"(?<=(?<![A-Za-z0-9_-])[0-9a-f]{32})-us\d{1,2}(?![A-Za-z0-9_-])")
# Discord bot tokens: the bot's id in base64 (a number, so it starts with M, N or O), a dot, a
# 6-character timestamp, a dot and the HMAC (27 characters, 38 in newer tokens). The pattern starts
# at the first dot, which is searched for quickly, and the check reads the id backwards from it.
_DISCORD_BOT_TOKEN = re.compile(r"\.[A-Za-z0-9_-]{6}\.(?P<v>[A-Za-z0-9_-]{27,40})(?![A-Za-z0-9_-])")
_TOKEN_CHARACTERS = frozenset(string.ascii_letters + string.digits + "_-")


# An identifiable token, the way most vendors now write keys (GitHub, Slack, Stripe, npm, PyPI, Doppler,
# Shopify, Linear, Vercel, Tailscale, ...): a short lowercase prefix of one or two words joined by
# ``_`` or ``-`` (``xoxb-``, ``lin_api_``, ``dckr_pat_``), then a long random body of base62, the
# whole standing as a token of its own. It catches the vendors that no table lists yet. Public ids
# with a prefix (Stripe's ``cus_``, ``pi_``, ``req_``: 14 to 27 characters) are shorter than the body
# must be, and prefixes of public keys and ids (publishable keys, checkout sessions, digests) are
# left out by name.
MIN_IDENTIFIABLE_BODY = 30
MIN_IDENTIFIABLE_ENTROPY = 4.0
_IDENTIFIABLE_TOKEN = re.compile(
    rf"(?P<p>[a-z]{{2,10}}(?:[_-][a-z]{{1,10}}){{0,2}}[_-])(?P<v>[A-Za-z0-9]{{{MIN_IDENTIFIABLE_BODY},200}})"
    r"(?![A-Za-z0-9_+/=~-])(?!\.[A-Za-z0-9])"
)
# Prefixes of things that are public or identifiers: publishable and client-side keys (Stripe and
# Clerk ``pk_``, PostHog ``phc_``), Stripe Connect client ids (``ca_``) and checkout sessions
# (``cs_``), digests (``sha512-``, ``md5-``); and the names of made-up values (``foo_``, ``test_``).
_PUBLIC_TOKEN_PREFIXES = frozenset(
    {
        "pk", "pub", "public", "publishable", "phc", "ca", "cs", "sha", "md", "id", "ids", "uuid", "hash",
        "digest", "foo", "bar", "baz", "qux", "test", "mock", "stub",
    }
)  # fmt: skip


# A body that is mostly words (``ValueMapListCache...``: a capital or none, then two or more
# lowercase letters with a vowel) is a name. In random base62 of 30 to 60 characters such words
# make up 40% or more about once in twenty; in names of words (``get``, ``User``, ``V2``, ``HTTP``)
# all but one in twenty-five.
MAX_WORDY_SHARE = 0.4
_WORD_TOKEN = re.compile(r"[A-Z]?[a-z]*[aeiouy][a-z]*")


def _wordy(body: str) -> bool:
    words = sum(
        len(t) for t in _CAMEL_TOKENS.findall(body) if len(t) >= 3 and _WORD_TOKEN.fullmatch(t) is not None
    )
    return words >= MAX_WORDY_SHARE * len(body)


# A body that walks the alphabet (``aAbBcCdD...``, ``0123456789abcdef...``) was typed, not generated:
# in random base62 about one neighbouring pair in twelve is the same letter or the next one, in
# either case; in these most are.
MAX_SEQUENTIAL_SHARE = 0.4


def _sequential(body: str) -> bool:
    folded = body.lower()
    steps = sum(abs(ord(a) - ord(b)) <= 1 for a, b in itertools.pairwise(folded))
    return steps > MAX_SEQUENTIAL_SHARE * (len(folded) - 1)


def _identifiable_token(match: re.Match[str]) -> bool:
    prefix = match.group("p")[:-1]
    if any(part in _PUBLIC_TOKEN_PREFIXES for part in re.split(r"[_-]", prefix)):
        return False
    # Inside a URL path, a dotted name or a longer base64 run it is part of something else.
    if match.start() > 0 and match.string[match.start() - 1] in "/.:@#+~":
        return False
    body = match.group("v")
    lower, upper, digit, _ = _classes(body)
    # One case and digits (``bkua_z1x2...``), not hex: random by the lowercase measure.
    if lower and digit and not upper:
        return (
            _HEX_ONLY.fullmatch(body) is None
            and _looks_random_lowercase(body)
            and not _sequential(body)
            and _varied(match.group())
        )
    return (
        lower
        and upper
        and digit
        and _shannon_entropy(body) >= MIN_IDENTIFIABLE_ENTROPY
        and _looks_random(body)
        and not _sequential(body)
        and not _wordy(body)
        and _varied(match.group())
    )


def _discord_bot_token(match: re.Match[str]) -> bool:
    text, dot = match.string, match.start()
    start = dot
    while start > 0 and text[start - 1] in _TOKEN_CHARACTERS and dot - start <= 28:
        start -= 1
    return 24 <= dot - start <= 28 and text[start] in "MNO" and _varied(match.group("v"))


# ---------------------------------------------------------------------------------------------
# Hidden forms: encodings, more languages, more tools, webhook URLs, named services
# ---------------------------------------------------------------------------------------------

# The DER of a private key, by its first bytes: a SEQUENCE, then a version INTEGER (0 or 1), then
# what follows the version in PKCS#1 (an INTEGER: the modulus), PKCS#8 (a SEQUENCE: the algorithm)
# or SEC 1 (an OCTET STRING: the EC key). Certificates, public keys and CSRs open with two
# SEQUENCEs, so they do not match.
_DER_PRIVATE_KEY = re.compile(rb"\x30(?:\x82..|\x81.|[\x00-\x7f])\x02\x01[\x00\x01][\x02\x30\x04]", re.DOTALL)


def _bare_pem_body(blob: str) -> bool:
    """A line of 60+ base64 characters whose bytes open like the DER of a private key: the first
    line of a PEM body whose BEGIN/END lines were left out."""
    if len(blob) < 60 or blob[0] != "M":
        return False
    try:
        head = base64.b64decode(blob[:24])
    except (binascii.Error, ValueError):
        return False
    return _DER_PRIVATE_KEY.match(head) is not None


# Base64 (standard or URL-safe) long enough to hide a token or an ``id:secret`` pair.
_BASE64_BLOB = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{16,}={0,2}(?![A-Za-z0-9+/_=-])")
_ID_SECRET = re.compile(r"[\w.@+-]{2,100}:(?P<v>[^\s:]{6,200})")
# A GraphQL node id: GitHub's legacy ones are base64 of "<length of the type>:<type><number>"
# (``012:Organization1``), Relay's of "<Type>:<id>" (``User:<uuid>``).
_GITHUB_NODE_ID = re.compile(r"0?([1-9][0-9]?):([A-Z][A-Za-z]+)[0-9]+")
_RELAY_NODE_ID = re.compile(rf"[A-Z][A-Za-z]+:(?:[0-9]+|{_UUID.pattern})")


def _graphql_node_id(decoded: str) -> bool:
    github = _GITHUB_NODE_ID.fullmatch(decoded)
    if github is not None:
        return int(github.group(1)) == len(github.group(2))
    return _RELAY_NODE_ID.fullmatch(decoded) is not None


def _decoded_base64(blob: str) -> str | None:
    """`blob` decoded, when it is base64 of printable text; otherwise None."""
    data = blob.rstrip("=")
    if len(data) % 4 == 1:
        return None
    padded = data + "=" * (-len(data) % 4)
    try:
        raw = (
            base64.urlsafe_b64decode(padded)
            if "-" in data or "_" in data
            else base64.b64decode(padded, validate=True)
        )
        decoded = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    return decoded if decoded.isprintable() and len(decoded) >= 12 else None


_PEM_HEADER = re.compile(r"-----BEGIN[A-Z0-9 ]{0,20} PRIVATE KEY(?: BLOCK)?-----")


def _base64_hidden(text: str) -> SecretMatch | None:
    """A credential inside base64: what the rules find in the decoded text, or an ``id:secret`` pair
    (how client credentials and registry auth are sent)."""
    for match in _BASE64_BLOB.finditer(text):
        if _bare_pem_body(match.group()):
            return SecretMatch("private_key", _LABELS["private_key"])
        decoded = _decoded_base64(match.group())
        if decoded is None:
            continue
        # Base64 of a private-key header alone is the encoded prefix that notes quote
        # ("encoded keys start with LS0tLS1CRUdJTi..."), not a paste cut short after its header.
        if (inner := _find(decoded, decode=False)) is not None and not _PEM_HEADER.fullmatch(decoded.strip()):
            return inner
        pair = _ID_SECRET.fullmatch(decoded)
        if (
            pair is not None
            and not _graphql_node_id(decoded)
            and (_credential_like(pair["v"]) or _password_like(pair["v"]))
        ):
            return SecretMatch("basic_auth", _LABELS["basic_auth"])
    return None


# "パスワードは X", "密码是 X", "비밀번호는 X": the value is the ASCII run after the word and its particle.
_CJK_PASSWORD_WORDS = ("パスワード", "暗証番号", "密码", "密碼", "口令", "비밀번호", "암호")
_CJK_PASSWORD = re.compile(
    "(?:" + "|".join(_CJK_PASSWORD_WORDS) + r")[ \t]*(?:は|が|:|是|为|為|는|은|=|->)?[ \t]*[「『\"']?"
    r"(?P<v>[!-~]{6,100})"
)


def _cjk_value(match: re.Match[str]) -> bool:
    value = match.group("v").rstrip("\"'.,;:!?)]}」』")
    return _password_like(value)


# The value before the word: "use X as the password", "nimm X als Passwort", "X is the new password".
# The rule finds the password word (at its anchors) and reads backwards from it.
_PASSWORD_WORD = rf"(?:{_PASSWORD_WORDS})\b"
_VALUE_BEFORE = re.compile(
    r"""(?:^|[\s(])["'`]?(?P<v>[^\s"'`]{6,100}?)["'`]?[ \t]+(?i:as|als|comme|como|come|is|ist|est|es|è|är|er)"""
    r"[ \t]+(?i:(?:the|a|an|my|our|new|das|die|ein|neue|neues|le|la|un|nouveau|el|nuevo|nueva|il|nuovo|"
    r"nuova|o|novo|nova)[ \t]+){0,2}$"
)


# "... is the password reset mail": the word names a kind of thing, not the value before it.
_PASSWORD_AS_MODIFIER = re.compile(
    r"[ \t]+(?i:reset|policy|policies|manager|change|rotation|expiry|field|prompt|hash|length|rules?"
    r"|requirements?|flow|e-?mail|mail|page|form|link|template)\b"
)


def _value_before(match: re.Match[str]) -> bool:
    """The token right before "as the password" (or its translation) is a password."""
    text, start = match.string, match.start()
    if _PASSWORD_AS_MODIFIER.match(text, match.end()):
        return False
    before = _VALUE_BEFORE.search(text, max(0, start - 140), start)
    return before is not None and _password_like(before.group("v"))


# Command lines of tools that take a password as a positional argument or a Windows-style switch.
_NET_USE = re.compile(r"\bnet[ \t]+use[ \t]+(?P<args>[^\n]+)", re.IGNORECASE)
_NET_USE_NOT_PASSWORD = re.compile(r"[A-Za-z]:|\\\\\S*|/\S*|\*|\S*\\\S*|[A-Za-z]:\\\S*")


def _net_use(match: re.Match[str]) -> bool:
    """``net use [drive:] \\\\server\\share [password] /user:NAME [password]``."""
    args = match.group("args")
    for token in re.finditer(r"\S+", args):
        word = token.group()
        if _NET_USE_NOT_PASSWORD.fullmatch(word):
            continue
        # The first word that is not a drive, a share, a switch or ``*`` is the password, unless
        # prose follows it ("... /user:jdoe prompts for the password").
        if _PROSE_AFTER.match(args, token.end()) or _PROSE_AFTER.match(" " + word):
            return False
        return _typed_password(_unquote(word)[0])
    return False


_POSITIONAL_PASSWORD = re.compile(
    # htpasswd -b[cBmsdpi] FILE USER PASSWORD
    r"\bhtpasswd[ \t]+-(?-i:[a-zA-Z]*b[a-zA-Z]*)(?:[ \t]+-[a-zA-Z]+)*[ \t]+\S+[ \t]+\S+[ \t]+(?P<v>[^\s]+)"
    # sqlplus USER/PASSWORD[@DB]
    r"|\bsqlplus[ \t]+(?:-\w+[ \t]+)*[\w.$#-]+/(?P<v2>[^\s@/]+)"
    # echo 'USER:PASSWORD' | chpasswd
    r"|\becho[ \t]+['\"]?[\w.-]+:(?P<v3>[^\s'\"]+)['\"]?[ \t]*\|[ \t]*(?:sudo[ \t]+)?chpasswd"
    # xfreerdp /p:PASSWORD, wmic /password:PASSWORD, cmdkey /pass:PASSWORD, schtasks /rp PASSWORD
    r"|\b(?:[xw]l?freerdp|wmic|cmdkey|schtasks|runas)\b[^\n]*?[ \t]/(?:p|pass|password|rp)[: \t](?P<v4>[^\s/]+)",
    re.IGNORECASE,
)


def _positional_password(match: re.Match[str]) -> bool:
    value = next(v for v in match.group("v", "v2", "v3", "v4") if v is not None)
    return _typed_password(_unquote(value)[0])


# More commands that take a password in a place of their own; each is tried only where its command
# starts (`_Rule.anchors`), so a text that merely says "network" or "setup.py" costs one lookup.
_IMPACKET_SCRIPTS = (
    "psexec", "smbexec", "wmiexec", "atexec", "dcomexec", "secretsdump", "mssqlclient", "smbclient", "lookupsid",
    "getuserspns", "getnpusers", "gettgt", "getst", "rpcdump", "samrdump",
)  # fmt: skip
_TYPED_PASSWORD_COMMANDS: tuple[tuple[re.Pattern[str], tuple[str, ...], tuple[str, ...]], ...] = (
    # net user NAME PASSWORD [/add]: the password comes last on its line or before a switch.
    (
        re.compile(
            r"net[ \t]+user[ \t]+(?:\"[^\"\n]+\"|[^\s/\"]+)[ \t]+(?P<v>\"[^\"\n]+\"|[^\s/*\"]\S*)(?=[ \t]+/\w|[ \t]*$)",
            re.IGNORECASE | re.MULTILINE,
        ),
        ("net user",),
        ("net",),
    ),
    # impacket: psexec.py DOMAIN/USER:PASSWORD@HOST (impacket-psexec, wmiexec.py, secretsdump.py, ...).
    (
        re.compile(
            rf"(?:impacket-[a-z]+|(?:{'|'.join(_IMPACKET_SCRIPTS)})\.py)(?:[ \t]+-\S+)*[ \t]+"
            r"['\"]?(?:[\w.-]+/)?[\w.$-]+:(?P<v>[^\s@'\"]+)@",
            re.IGNORECASE,
        ),
        ("impacket-", ".py"),
        ("impacket-", *(f"{script}.py" for script in _IMPACKET_SCRIPTS)),
    ),
    # PGPASSWORD=X psql, MYSQL_PWD=X mysql: the variable set for the one command that reads it.
    (
        re.compile(
            r"(?:pgpassword|mysql_pwd|rediscli_auth|sshpass)=(?P<v>\"[^\"\n]+\"|'[^'\n]+'|[^\s'\"]+)[ \t]+"
            r"(?:[A-Z_]+=\S*[ \t]+)*(?:psql|pg_\w+|createdb|dropdb|vacuumdb|pgbench|mysql\w*|mariadb\w*|"
            r"redis-cli|sshpass)\b",
            re.IGNORECASE,
        ),
        ("pgpassword=", "mysql_pwd=", "rediscli_auth=", "sshpass="),
        ("pgpassword=", "mysql_pwd=", "rediscli_auth=", "sshpass="),
    ),
)  # fmt: skip


# Webhook URLs whose path is the secret: a random segment after /hooks/, /webhooks/ (Mattermost,
# Rocket.Chat, Gitea, n8n, ...), Zapier's catch hooks and IFTTT's maker key; and URLs that carry a
# key, token or signature as a query parameter.
_HOOK_URL = re.compile(
    r"https?://hooks\.zapier\.com/hooks/catch/\d+/(?P<zap>[A-Za-z0-9]{5,})"
    r"|https?://[^\s/]+(?:/[^\s/?#]+)*?/(?:hooks|webhooks?|catch|key)/(?P<rest>[^\s?#<>\"']+)"
)
_URL_SECRET_PARAM = re.compile(
    r"https?://[^\s?#]+\?[^\s#]*?(?<=[?&])(?:key|token|secret|sig|signature|access_token|api_key|apikey|"
    r"auth|password|pwd|code)=(?P<v>[^&\s#<>\"']+)",
    re.IGNORECASE,
)


def _token_shaped(value: str) -> bool:
    """A random segment of 16+ characters (base64url, hex or base36)."""
    if len(value) < 16 or _is_placeholder(value) or _UUID.fullmatch(value):
        return False
    joined = _TOKEN_SEPARATORS.sub("", value)
    return (
        _looks_random(joined)
        or _looks_random(joined.lower(), mixed_case=False)
        or _looks_random_lowercase(joined.lower())
        or (len(value) >= 32 and _HEX_ONLY.fullmatch(value) is not None)
    )


def _hook_url(match: re.Match[str]) -> bool:
    if match.group("zap") is not None:
        return not _is_placeholder(match.group("zap"))
    return any(_token_shaped(segment) for segment in match.group("rest").split("/"))


def _url_secret_param(match: re.Match[str]) -> bool:
    return _token_shaped(match.group("v"))


# Services whose keys have no prefix of their own (Datadog's are 32 or 40 hex characters): a
# key-shaped value right after the service's name, optionally with "API key", "token" and the like.
_VENDORS = (
    r"datadog|dd[ _-]?(?:api|app|client)[ _-]?(?:key|token)|new[ _-]?relic|newrelic|pager[ _-]?duty|mailgun|"
    r"mailchimp|discord|sentry|heroku|algolia|okta|auth0|cloudflare|vercel|netlify|mixpanel|amplitude|bugsnag|"
    r"rollbar|circleci|travis|jfrog|artifactory|dropbox|asana|airtable|contentful|launchdarkly|snyk|"
    r"sonarqube|sonarcloud|fastly|pusher|supabase|twitch|braintree|plaid|intercom|zendesk|freshdesk|"
    r"hubspot|salesforce|openweather(?:map)?|mapbox|honeycomb|logdna|loggly|papertrail|opsgenie|splunk|"
    r"sumo[ _-]?logic|codecov|coveralls|browserstack|sauce[ _-]?labs|postmark|mandrill|sparkpost|nexmo|"
    r"vonage|messagebird|clickup|trello|figma|typeform|shippo|easypost|adyen|etherscan|infura"
)
_VENDOR_KEY = (
    rf"(?:{_VENDORS})(?![a-z])[^\n]{{0,40}}?(?<![a-z0-9_-])(?P<v>[a-z0-9_-]{{20,100}})(?![a-z0-9_-])"
)
_VENDOR_HINTS = tuple(
    sorted(
        {
            "datadog", "dd", "new", "pager", "mailgun", "mailchimp", "discord", "sentry", "heroku", "algolia", "okta",
            "auth0", "cloudflare", "vercel", "netlify", "mixpanel", "amplitude", "bugsnag", "rollbar",
            "circleci", "travis", "jfrog", "artifactory", "dropbox", "asana", "airtable", "contentful",
            "launchdarkly", "snyk", "sonar", "fastly", "pusher", "supabase", "twitch", "braintree", "plaid",
            "intercom", "zendesk", "freshdesk", "hubspot", "salesforce", "openweather", "mapbox", "honeycomb",
            "logdna", "loggly", "papertrail", "opsgenie", "splunk", "sumo", "codecov", "coveralls",
            "browserstack", "sauce", "postmark", "mandrill", "sparkpost", "nexmo", "vonage", "messagebird",
            "clickup", "trello", "figma", "typeform", "shippo", "easypost", "adyen", "etherscan", "infura",
        }
    )
)  # fmt: skip


def _vendor_key(match: re.Match[str]) -> bool:
    value = match.group("v")
    between = match.string[match.start() : match.start("v")]
    if _NOT_A_KEY_BETWEEN.search(between):
        return False
    # A segment of the path of a link to the service itself: a file, board, style or form of the
    # service (``figma.com/file/<key>/...``, ``Figma: https://www.figma.com/design/<key>/...``,
    # ``dropbox.com/scl/fi/<id>/``), not a key. Keys in a link's query or its user part, and webhook
    # paths, are other rules'. A value in a link's host (``https://<deploy id>--site.netlify.app``)
    # names a machine.
    value_start = match.start("v")
    if _LINK_PATH_ON_VENDOR.search(match.string, max(0, value_start - _LINK_REACH), value_start) or (
        "://" in between and match.string.startswith(".", match.end())
    ):
        return False
    # Vercel's ids carry their object's type: a deployment, a project, a team (``prj_<28>``).
    if _VERCEL_ID.match(value):
        return False
    return _token_shaped(value) or _random_upper(value)


_VERCEL_ID = re.compile(r"(?:dpl|prj|team)_[A-Za-z0-9]{20,32}\Z")
# A link to the service ending right before the value: a host of the service (subdomains too, with
# or without a scheme), then path segments ending in ``/`` (no query, fragment or space).
_LINK_PATH_ON_VENDOR = re.compile(
    rf"(?i)(?<![a-z0-9.-])(?:[a-z0-9-]+\.)*(?:{_VENDORS})(?:\.[a-z0-9-]+)+(?::\d+)?/(?:[^\s/?#=]+/)*\Z"
)
_LINK_REACH = 200  # how far back before a value its link is looked for


# Words between a service's name and a value that make the value something else: a commit, a digest,
# a version, a deployment, a ticket, a file (Figma calls a file's id its key).
_NOT_A_KEY_BETWEEN = re.compile(
    r"(?i)\b(?:commit|sha|sha\d{1,3}|digest|checksum|version|release|build|deployment|ticket|issue|trace"
    r"|request|id|file[ _-]key)\b"
)


# SoftLayer (IBM Cloud classic) API keys are 64 hex characters with no prefix: after the name, any
# such value that is not a stand-in (a repeated test key included) is one.
_SOFTLAYER_KEY = r"softlayer[^\n]{0,40}?(?<![a-z0-9])(?P<v>[a-f0-9]{64})(?![a-z0-9])"


def _softlayer_key(match: re.Match[str]) -> bool:
    between = match.string[match.start() : match.start("v")]
    return _NOT_A_KEY_BETWEEN.search(between) is None and _varied(match.group("v"))


# "Your API2CART key is <32 hex>": a key named after its service, then hex of 32+ characters right
# after the verb. Random keys in prose are the generic rule's; hex is left out there (digests,
# commits), so here the word before ``key`` decides: not a data-structure key, not a public one.
_HEX_KEY_IN_PROSE = r"key[ \t]+(?:is|was|=|:)[ \t]+[\"'`]?(?P<v>[0-9a-f]{32,64})(?![0-9a-z])"
_HEX_KEY_ANCHORS = ("key is ", "key: ", "key = ")


def _hex_key_in_prose(match: re.Match[str]) -> bool:
    text, start = match.string, match.start()
    words = _NAME_WORDS_BEFORE.findall(text, max(0, start - 30), start)
    before = text[start - 1 : start]
    if not words or (not before.isspace() and before not in "_-"):
        return False
    qualifier = words[-1].lower()
    if qualifier in _NOT_CREDENTIAL_KEYS or qualifier in _PUBLIC_KEY_OWNERS or qualifier in _NOT_A_KEY_WORDS:
        return False
    return _varied(match.group("v"))


_NOT_A_KEY_WORDS = frozenset(
    {
        "the", "a", "an", "this", "that", "its", "deploy", "signing", "host", "ssh", "image", "item", "record",
        "entry", "node", "document", "doc", "version", "data", "table", "column", "field", "busting", "md5",
        "sha256",
    }
)  # fmt: skip


# SonarQube's ``sonar.login`` (and ``sonar.token``) is a token, 40 hex characters before the
# ``squ_`` prefixes: a property, a camelCase variable (``$sonarLogin``) or a pair of literals.
_SONAR_LOGIN = (
    r"""sonar[._-]?(?:login|token)["']?(?:[ \t]*(?::=|=|:|,)[ \t]*|[ \t]+)["']?"""
    r"(?P<v>[0-9a-f]{40})(?![0-9a-z])"
)
# ``vault operator unseal <key>``: an unseal key (a Shamir share, 44 characters of base64).
_VAULT_UNSEAL = r"""unseal[ \t]+["']?(?P<v>[A-Za-z0-9+/]{43,44}=?)(?![A-Za-z0-9+/=])"""


# Snyk API tokens are UUIDs: one is a token only after a Snyk name that is not an id's
# (``SNYK_TOKEN``, ``API_SNYK``; not ``SNYK_ORG_ID``), or after ``snyk auth``.
_SNYK_TOKEN = (
    rf"""snyk(?P<n>[a-z0-9_]*)["']?[ \t]*(?::=|=>|=|:)[ \t]*["']?(?P<v>{_UUID.pattern})(?![0-9a-f-])"""
    rf"|snyk[ \t]+auth[ \t]+(?P<a>{_UUID.pattern})(?![0-9a-f-])"
)
_SNYK_ID_WORDS = frozenset({"org", "organization", "project", "id", "group", "integration", "target", "user"})


def _snyk_token(match: re.Match[str]) -> bool:
    text, start = match.string, match.start()
    name_start = _name_start(text, start, "_")
    if match.group("a") is not None and name_start < start:
        return False
    name = text[name_start : match.end("n")] if match.group("n") is not None else ""
    if _SNYK_ID_WORDS.intersection(name.lower().split("_")):
        return False
    return _varied((match.group("v") or match.group("a")).replace("-", ""))


# Mailgun private API keys: ``key-`` and 32 hex, the whole a token of its own; not a part of a path,
# a dotted or colon-separated name (``s3://cache/key-<md5>``, ``app:key-<md5>``).
_MAILGUN_KEY = re.compile(r"key-(?P<v>[0-9a-f]{32})(?![A-Za-z0-9_-])")
# Braintree (PayPal) access tokens: ``access_token$production$<merchant id>$<secret>``.
_BRAINTREE_TOKEN = re.compile(
    r"access_token\$(?:production|sandbox)\$(?P<v>[a-z0-9]{16}\$[a-z0-9]{32})(?![A-Za-z0-9])"
)

# AWS session tokens (STS temporary credentials): 300 to 1,000+ characters of base64 that open with
# an encoded header of their own (``FQoGZXIvYXdz``, ``FwoGZXIvYXdz``, ``IQoJb3JpZ2lu``, ``AQoDYXdz``),
# or any such run after their names. A few characters masked in one (``...XXXXXXXX...``) leave the
# rest in view: a piece of 40+ random characters between the masks is still refused.
_AWS_SESSION_TOKEN_OPENINGS = ("FQoGZXIvYXdz", "FwoGZXIvYXdz", "IQoJb3JpZ2lu", "AQoDYXdz")
_AWS_SESSION_TOKEN = re.compile(
    rf"(?P<v>(?:{'|'.join(_AWS_SESSION_TOKEN_OPENINGS)})[A-Za-z0-9+/]{{100,}}={{0,3}})(?![A-Za-z0-9+/=])"
)
_AWS_SESSION_TOKEN_NAMED = (
    r"(?:aws[_-]?session[_-]?token|aws[_-]?security[_-]?token|x-amz-security-token)"
    r"""["']?[ \t]*(?::=|=>|=|:)?[ \t]*["']?(?P<v>[a-z0-9+/]{100,}={0,3})(?![a-z0-9+/=])"""
)
MIN_SESSION_TOKEN_PIECE = 40
_MASK_RUN = re.compile(r"[xX*#.?\u2022]{4,}")


def _session_token(match: re.Match[str]) -> bool:
    value = match.group("v")
    if _TEMPLATE.search(value) is not None:
        return False
    # Marked as a sample (``SAMPLEIvYXdz...``): a key only if `_key_beside_marker` says so.
    if _WORD_MARKERS.search(value) is not None:
        return _key_beside_marker(value)
    return any(
        len(piece) >= MIN_SESSION_TOKEN_PIECE
        and not _is_placeholder(piece)
        and _looks_random(_TOKEN_SEPARATORS.sub("", piece))
        for piece in _MASK_RUN.split(value)
    )


def _random_upper(value: str) -> bool:
    """Uppercase letters and digits, randomly mixed (base32 or base36 keys); ULIDs excluded."""
    if len(value) < 20 or not value.isalnum() or value.upper() != value or _HEX_ONLY.fullmatch(value):
        return False
    if _ULID.fullmatch(value):
        return False
    return _looks_random(value.lower(), mixed_case=False)


_ULID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")


# Keys named after what they are keys of, with ``_`` or ``-`` (``softlayer_key``, ``ibm-iam-key``),
# assigned or after a long flag. Data-structure and identifier keys are not credentials: the word
# before ``key`` says which (``cache_key``, ``sort_key``, ``public_key``, ``site_key``, ...).
_NAMED_KEY = (
    r"[_-]key(?:[_-]?[0-9]{1,2})?(?![a-z0-9_-])(?:[\"']?[ \t]*(?::=|=>|=|:)|(?P<flag>[ \t]+))[ \t]*"
    + _ASSIGNED_VALUE
)
_NOT_CREDENTIAL_KEYS = frozenset(
    {
        "cache", "sort", "partition", "primary", "foreign", "idempotency", "dedup", "dedupe",
        "deduplication", "lookup", "hash", "range", "row", "shard", "group", "index", "map", "composite",
        "unique", "natural", "surrogate", "routing", "object", "s3", "bucket", "blob", "file", "content",
        "build", "public", "pub", "publishable", "site", "host", "checksum", "digest", "etag", "commit",
        "revision", "trace", "correlation", "request", "event", "message", "translation", "i18n", "label",
        "metric", "sharding", "join", "dict", "hot",
    }
)  # fmt: skip
_KEY_VALUE = re.compile(r"[A-Za-z0-9_+/=.-]{20,200}")


def _key_shaped(value: str) -> bool:
    """A key's value, random or not: 20+ characters of a token alphabet with an unbroken run of
    letters and digits, both present (``abcd1234abcd1234...`` included); not a UUID, a version,
    hyphenated words, a stand-in or a reference."""
    if not _KEY_VALUE.fullmatch(value):
        return False
    # A repeated unit with letters (``abcd1234abcd1234...``) is a test key; digits alone are an id.
    if _test_key(value) and value.isalnum() and not value.isdigit():
        return True
    if _is_placeholder(value) or _is_reference(value):
        return False
    if _UUID.fullmatch(value) or _HYPHEN_WORDS.fullmatch(value) or _VERSION.fullmatch(value):
        return False
    if max((len(run) for run in _ALNUM_RUNS.findall(value)), default=0) < MIN_ALNUM_RUN:
        return False
    lower, upper, digit, _ = _classes(value)
    return digit and (lower or upper)


def _named_key(match: re.Match[str]) -> bool:
    text, start = match.string, match.start()
    name_start = _name_start(text, start)
    name = text[name_start:start]
    qualifier = re.split(r"[_-]", name.lower().strip("_-"))[-1] if name.strip("_-") else ""
    if not qualifier or qualifier in _NOT_CREDENTIAL_KEYS:
        return False
    if match.group("flag") is not None and not name.startswith("--"):
        return False
    return _key_shaped(_unquote(match.group("v"))[0])


# camelCase names of keys: a lowercase letter or digit, then ``Key`` (``fastlyKey``, ``azureKey2``).
_CAMEL_KEY = re.compile(
    r"(?<=[a-z0-9])Key(?:[_-]?[0-9]{1,2})?(?![A-Za-z0-9_-])(?:[ \t]+string)?[\"']?[ \t]*(?::=|=>|=|:)[ \t]*"
    + _ASSIGNED_VALUE
)
_CAMEL_WORD = re.compile(r"[A-Z]?[a-z0-9]+$")


def _camel_key(match: re.Match[str]) -> bool:
    """A camelCase key (not a data-structure key such as ``cacheKey``) with a random value."""
    text, start = match.string, match.start()
    name_start = _name_start(text, start, "_")
    qualifier = _CAMEL_WORD.search(text, name_start, start)
    if qualifier is None or qualifier.group().lower() in _NOT_CREDENTIAL_KEYS:
        return False
    value = _unquote(match.group("v"))[0]
    return _key_shaped(value) and (_token_shaped(value) or _random_upper(value))


# A credential's name, read widely, then a key-shaped value: the name may be glued to a vendor's
# (``boxKEY``, ``zerobounceACCESS=``, ``dd_secret_key-``, ``podioToken``) or stand after it
# (``bugsnag secret ...``, ``pdfshift-KEY ...``), and may be two or three credential words
# (``SECRET key``, ``ACCESS code``, ``access_token``). The separator is one of ``= : - _ .`` or a
# blank, the value a token of its own. Tried where a credential word starts (`_Rule.anchors`).
_CREDENTIAL_NAME_WORDS = ("key", "secret", "token", "access", "private", "credential", "pat")
_NAME_THEN_VALUE = (
    rf"(?P<n>{'|'.join(_CREDENTIAL_NAME_WORDS)})s?"
    r"(?:[ \t_.-]{0,2}(?:key|secret|token|access|private|code|tok|credentials?)s?)*"
    r"""(?![a-z0-9])(?:\\?["'])?[ \t]*(?::=|=>|[:=. \t_-])[ \t]*(?:\\?["'`])?"""
    r"(?P<v>[a-z0-9+/_.=-]{16,1000})(?![a-z0-9+/_.=-])"
)
# Words before the name that make it something other than a secret: data-structure keys
# (`_NOT_CREDENTIAL_KEYS`), key ids that are public (KMS, GPG, SSH).
_PUBLIC_KEY_OWNERS = frozenset({"kms", "gpg", "pgp", "gnupg", "ssh", "id", "ids"})
_NAME_WORDS_BEFORE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
MIN_NAMED_VALUE = 16
_BEARER_HEX = re.compile(r"[0-9a-fA-F]{32,}")
_NAME_VALUE_SEPARATORS = re.compile(r"[-._]")
# A value of 16 to 19 characters counts with a few digits in it (``abc123def456789a``).
MIN_SHORT_VALUE_DIGITS = 3


def _named_value_shaped(value: str, *, uuid_allowed: bool) -> bool:
    """A value after a credential's name: key-shaped (`_key_shaped`, counting runs included), random
    letters (`_looks_random`), 16 to 19 letters and digits, or a UUID where the name allows one."""
    if _UUID.fullmatch(value):
        return uuid_allowed and _varied(value.replace("-", ""))
    lower, upper, digit, other = _classes(value)
    # Letters in one case alone (a word, an alphabet) or digits alone (an id) are not a key here,
    # unless the letters repeat a unit (``abcdefabcdef...``): a test key, as in `_key_shaped`.
    if not (digit and (lower or upper)) and not (lower and upper):
        return (lower or upper) and len(value) >= 20 and _test_key(value)
    if _VERSION.fullmatch(value) or _is_placeholder(value):
        return False
    # A dotted value is a reference (``settings.SECRET_KEY``) unless a part of it is random: a
    # vendor's prefix and a token (``sk.eyJ1...``, ``hawk.nHAO...``).
    if _is_reference(value) and not (
        _DOTTED_NAME.fullmatch(value) and any(_looks_random(part) for part in value.split("."))
    ):
        return False
    if len(value) < 20:
        return (
            not other
            and _HEX_ONLY.fullmatch(value) is None
            and len(_DIGIT.findall(value)) >= MIN_SHORT_VALUE_DIGITS
        )
    if max(map(len, _ALNUM_RUNS.findall(value)), default=0) >= MIN_ALNUM_RUN:
        return _key_shaped(value) or _looks_random(value)
    # Groups joined by ``-``, ``.`` or ``_`` (``ABCD1234-EFGH5678-...``, ``abc.def.ghi123...``): read
    # as one run, unless the groups are words (``payments-v2-...``) or the path of a file (``/``).
    if "/" in value:
        return False
    joined = _NAME_VALUE_SEPARATORS.sub("", value)
    return not _wordy(joined) and _key_shaped(joined)


def _name_then_value(match: re.Match[str]) -> bool:
    # The cheap tests first: this runs wherever a credential word is followed by a long run.
    value = _unquote(match.group("v"))[0].rstrip(".")
    if len(value) < MIN_NAMED_VALUE or _ULID.fullmatch(value) or _PUBLIC_PREFIX.match(value):
        return False
    prefix = _PREFIX_STUB.match(value)
    if prefix is not None and prefix.group()[:-1].lower() in _PUBLIC_TOKEN_PREFIXES:
        return False
    text, start = match.string, match.start()
    name = match.group("n").lower()
    # ``pat`` (a personal access token) only as a word of its own: ``ado_pat``, ``devops pat``.
    if name == "pat" and start > 0 and text[start - 1].isalpha():
        return False
    # Inside a path, a URL or a Redis-style name (``s3://assets/key-<hex>``, ``app:key-<hex>``) it is a
    # name; a dotted name (``app.api.key = ...``) is a property and counts.
    line_start = text.rfind("\n", 0, start) + 1
    name_start = _name_start(text, start)
    if name_start > 0 and text[name_start - 1] in "/:@#~+":
        return False
    if _TAILSCALE_PUBLIC_KEY.match(text, name_start):
        return False
    before = text[max(line_start, start - 40) : start]
    words = [w.lower() for w in _NAME_WORDS_BEFORE.findall(before)][-2:]
    if words and words[-1] in _NOT_CREDENTIAL_KEYS:
        return False
    if any(word in _PUBLIC_KEY_OWNERS for word in words) or _PUBLIC_BEFORE.search(before):
        return False
    # A UUID is a key only where the name says so: a secret, a token, a private one, or a key written
    # into its service's name (``holidayapiKEY-``, ``codakey-``); ``job_key: <uuid>`` and
    # ``KMS key <uuid>`` are ids.
    glued = start > 0 and text[start - 1].isalnum()
    return _named_value_shaped(value, uuid_allowed=glued or name in ("secret", "token", "private"))


# Tailscale writes its public keys with their type: a node's (``nodekey:``), a machine's (``mkey:``),
# a disco key (``discokey:``), each 64 hex characters; ``tailscale status`` and the admin console
# show them. Its private keys are ``privkey:`` and ``nlpriv:``, and its auth keys ``tskey-``.
_TAILSCALE_PUBLIC_KEY = re.compile(r"(?i:nodekey|mkey|discokey):[0-9a-fA-F]{64}(?![0-9A-Za-z])")


_XML_CREDENTIAL_NAMES = (
    r"(?:[a-z0-9_.:-]*[_.:-]|[a-z0-9]*)"
    r"(?:password|passwd|passphrase|secret|secretkey|token|apikey|api_key|accesskey|privatekey|clientsecret)"
)
_XML_ELEMENT = rf"<(?P<n>{_XML_CREDENTIAL_NAMES})>(?P<v>[^<\n]{{1,2000}})</(?P=n)>"


def _xml_element(match: re.Match[str]) -> bool:
    """The text of a credential element: one value, or a wrapped one (``{...}``) holding a random word."""
    value = match.group("v").strip()
    if _assigned_value_is_secret(value):
        return True
    # A plain word in a password's element is the password (``<password>mavenpass</password>``).
    name = match.group("n").lower()
    if ("pass" in name or "pwd" in name) and _plain_password(value):
        return True
    # Jenkins keeps a secret as ``{<base64>}``; a space inside is a wrapped value, not a sentence,
    # when one of its words is random, or when it carries the header of Jenkins' encrypted secrets
    # (``AQAAABAAA``) and a word of 12+ characters with letters and digits besides.
    if value.startswith("{") and value.endswith("}"):
        words = value[1:-1].split()
        if any(_token_shaped(word) for word in words):
            return True
        return any(word.startswith(_JENKINS_SECRET_HEADER) for word in words) and any(
            _jenkins_secret_part(word) for word in words if not word.startswith(_JENKINS_SECRET_HEADER)
        )
    return False


_JENKINS_SECRET_HEADER = "AQAAABAAA"


def _jenkins_secret_part(word: str) -> bool:
    if len(word) < 12 or _is_placeholder(word) or _is_reference(word):
        return False
    lower, upper, digit, _ = _classes(word)
    return digit and (lower or upper)


_LITERAL_PAIR = (
    r"""(?P<q>["'])[a-z0-9_.-]*?(?P<n>passwor[dt]|passwd|pwd|secret|token|api[_-]?key|(?:access|account|"""
    r"""private|secret|auth|subscription)[_-]?key)(?P=q)[ \t]*,[ \t]*"""
    r"""(?P<v>"\\"[^"\n\\]{1,2000}\\""|"[^"\n]{1,2000}"|'[^'\n]{1,2000}')"""
)
# A literal after a key's colon is that key's value; one followed by a colon is a key.
_AFTER_KEY = re.compile(r":[ \t]*\Z")
_BEFORE_VALUE = re.compile(r"[ \t]*:")
# A literal quoted twice: Android's ``buildConfigField "String", "API_KEY", "\"...\""`` (the
# value is Java source), or ``'"..."'``.
_QUOTED_TWICE = re.compile(r"""\\?(["'])(.*?)\\?\1""")


def _literal_pair(match: re.Match[str]) -> bool:
    """The value of a name-value pair of literals; a key's value must also be random or key-shaped.

    Not a pair: in a dict or JSON object the first literal may be the value of the key before it and
    the second the next key (``'PASSWORD': 'your_db_password', 'MEASUREMENT': ...``)."""
    text = match.string
    if _AFTER_KEY.search(text, max(0, match.start() - 4), match.start()) or _BEFORE_VALUE.match(
        text, match.end()
    ):
        return False
    value = _unquote(match.group("v"))[0]
    if (inner := _QUOTED_TWICE.fullmatch(value)) is not None:
        value = inner.group(2)
    name = match.group("n").lower()
    if not _assigned_value_is_secret(value):
        # A password's literal may be a plain word (``define('DB_PASSWORD', 'tiger')``).
        return name.startswith("p") and _plain_password(value)
    return name.startswith("p") or _token_shaped(value) or _key_shaped(value)


# A table row that names a credential in one cell and holds its value in the next: Markdown's
# ``| DB password | Tr0ub4dor&3 |``, a Postman export's ``apiKey |e9e0f0...``. A cell is one word
# or a few; a value with a blank in it is a description, not a value.
# Tried at each ``|``; the cell before it is read back from there.
_TABLE_VALUE = re.compile(r"\|[ \t]*`?(?P<v>[^|`\s][^|`\s]{0,200})`?[ \t]*(?:\||$)", re.MULTILINE)
_TABLE_NAME = re.compile(
    r"[A-Za-z0-9 _.-]{0,30}?(?P<n>passwor[dt]|passwd|pwd|passphrase|secret|token|key)s?[ \t]*", re.IGNORECASE
)


_TABLE_NAME_ENDS = frozenset("dsnye")


def _table_cell(passwords: bool) -> _Check:
    """The value cell of a credential's row: with `passwords`, a password after a password's name;
    otherwise a key-shaped or random value after a secret's, a token's or a qualified key's (not
    ``| sort key | ... |``)."""

    def check(match: re.Match[str]) -> bool:
        text, start = match.string, match.start()
        # The cheap test first: the cell before ends in the last letter of a credential's name.
        if text[max(0, start - 40) : start].rstrip()[-1:].lower() not in _TABLE_NAME_ENDS:
            return False
        cell_start = max(text.rfind("|", 0, start), text.rfind("\n", 0, start)) + 1
        name = _TABLE_NAME.fullmatch(text, cell_start, start)
        if name is None:
            return False
        kind = name.group("n").lower()
        if kind.startswith("p") != passwords:
            return False
        value = match.group("v")
        if _VERSION.fullmatch(value) or _SNAKE_WORDS.fullmatch(value.lower()):
            return False
        if passwords:
            return _password_like(value)
        if kind == "key":
            words = _NAME_WORDS_BEFORE.findall(text, cell_start, name.start("n"))
            qualifier = words[-1].lower() if words else ""
            if not qualifier or qualifier in _NOT_CREDENTIAL_KEYS or qualifier in _PUBLIC_KEY_OWNERS:
                return False
        return _credential_like(value) and (_key_shaped(value) or _token_shaped(value))

    return check


_DOCKER_AUTH = re.compile(r"""auth\\*["']\s*:\s*\\*["'](?P<v>[A-Za-z0-9+/]{8,}={0,2})\\*["']""")


def _docker_auth(match: re.Match[str]) -> bool:
    """``"auth": "<base64>"`` that decodes to ``user:password`` (or ``_json_key:{...}`` for GCR)."""
    try:
        decoded = base64.b64decode(match.group("v"), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    user, separator, password = decoded.partition(":")
    return bool(separator and user) and len(password) >= 4 and not _is_placeholder(password)


# ---------------------------------------------------------------------------------------------
# Password hashes, HashiCorp tokens, front-end build variables, connection calls and files
# ---------------------------------------------------------------------------------------------

# Password hashes (`secret_formats.PASSWORD_HASH_FORMATS`): one pattern, tried where a scheme's tag
# starts. The hash must not be a mask or a stand-in; ``.`` is part of the crypt alphabet, so an
# ellipsis inside one (``$apr1$r31.....$``) is salt, not an omission.
_PASSWORD_HASH = re.compile(
    "(?:" + "|".join(f"(?:{f.pattern})" for f in PASSWORD_HASH_FORMATS) + r")(?![A-Za-z0-9+/.=])"
)
# Where a hash may start: its tag, or just the ``$`` or ``{`` it opens with (one lookup instead of a
# dozen: the pattern fails at once on any other ``$``).
_PASSWORD_HASH_OPENINGS = tuple(
    sorted({o[0] if o[0] in "${" else o for f in PASSWORD_HASH_FORMATS for o in f.opening})
)
_HASH_STAND_IN = _markers(tuple(m for m in _PLACEHOLDER_MARKERS if "." not in m and m != "\u2026"))
# A Windows account dumped as pwdump writes it (``user:RID:LM hash:NT hash:::``), one per line.
_PWDUMP = re.compile(r"(?m:^)[ \t]*[^:\s]{1,64}:\d{1,10}:[0-9A-Fa-f]{32}:(?P<v>[0-9A-Fa-f]{32}):::")


def _password_hash(match: re.Match[str]) -> bool:
    """The hash part (the longest field) of a password hash is not a mask or a stand-in."""
    digest = max(re.split(r"[$:{}]", match.group()), key=len)
    return len(set(digest)) >= 8 and _HASH_STAND_IN.search(digest) is None


# Legacy Vault tokens (before 1.10: ``s.`` service, ``b.`` batch, 24 base62 characters) have no
# prefix of their own to speak of: they count after a Vault word (``VAULT_TOKEN``, ``X-Vault-Token``,
# ``vault login``) on the same line.
_VAULT_LEGACY = r"vault[^\n]{0,40}?(?<![a-z0-9_.-])(?P<v>[sb]\.[a-z0-9]{24})(?![a-z0-9_.-])"
# Terraform Cloud / Enterprise API tokens: 14 characters, ``.atlasv1.``, then 60 to 70 more.
_TERRAFORM_TOKEN = re.compile(
    r"(?<![A-Za-z0-9])(?P<v>[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,70})(?![A-Za-z0-9_=-])"
)
# Consul and Nomad ACL tokens are UUIDs, so only their header or variable name (or ``-token`` on
# their own command line) says that a UUID is one.
_ACL_TOKEN_NAMES = (
    r"x-(?:consul|nomad)-token|(?:consul|nomad)(?:_http)?(?:_acl)?(?:_master|_agent|_default)?_token"
)
_ACL_TOKEN = (
    rf"""(?:(?:{_ACL_TOKEN_NAMES})["']?[ \t]*(?::=|=>|=|:)?[ \t]*["']?"""
    rf"|\b(?:consul|nomad)\b[^\n|;&]{{0,120}}?[ \t]-token[= \t]+[\"']?)(?P<v>{_UUID.pattern})(?![0-9a-f-])"
)


def _acl_token(match: re.Match[str]) -> bool:
    return _varied(match.group("v").replace("-", ""))


# Build variables that a front-end bundler puts into the page (Create React App, Next.js, Vite, Expo,
# Vue CLI, Gatsby, Nuxt): one named after a key, secret, token or password holds a credential that
# ships to every browser. The value passes the checks of any assignment; publishable keys and site
# keys (the qualifier before ``KEY``) are public by design.
_FRONT_END_PREFIXES = (
    "react_app_",
    "next_public_",
    "vite_",
    "expo_public_",
    "vue_app_",
    "gatsby_",
    "nuxt_public_",
)
_FRONT_END_VARIABLE = (
    f"(?:{'|'.join(_FRONT_END_PREFIXES)})(?P<n>[a-z0-9_]*?)"
    r"(?:key|secret|token|password|passwd|pass|pwd)" + _NAME_END_AND_SEPARATOR + _ASSIGNED_VALUE
)


def _front_end_variable(match: re.Match[str]) -> bool:
    qualifier = match.group("n").strip("_").rsplit("_", 1)[-1].lower()
    if qualifier in _NOT_CREDENTIAL_KEYS or match.group("sep") in _COMPARISONS:
        return False
    value = _unquote(match.group("v"))[0]
    return not value.startswith(("pk_", "pk.")) and _assigned_value_is_secret(value)


# Connection calls that take the password as their third argument, a literal: ``mysql_connect(host,
# user, password)``, ``mysqli_connect``/``new mysqli``, ``new PDO(dsn, user, password)``,
# ``DriverManager.getConnection(url, user, password)``.
_ARGUMENT = r"""(?:"[^"\n]*"|'[^'\n]*'|[\w$.]+)"""
_CONNECT_CALL = re.compile(
    r"(?:\bmysqli?_connect|\bnew[ \t]+(?:mysqli|PDO)|\bgetConnection)[ \t]*\([ \t]*"
    rf"{_ARGUMENT}[ \t]*,[ \t]*{_ARGUMENT}[ \t]*,[ \t]*(?P<v>\"[^\"\n]{{1,200}}\"|'[^'\n]{{1,200}}')"
)
# Configuration as XML attributes: ``<add key="DbPassword" value="..."/>`` (.NET appSettings),
# ``<property name="password" value="..."/>`` (Spring, Hibernate), ``<entry key="db.password">...``
# (Java properties in XML). A key or token needs a random or key-shaped value, as in `_literal_pair`.
_XML_NAMED_VALUE = (
    r"""(?:key|name)[ \t]*=[ \t]*(?P<q>["'])[a-z0-9_.:-]*?(?P<n>passwor[dt]|passwd|pwd|secret|token|"""
    r"""api[_.-]?key|(?:access|account|private|secret|auth|subscription|client)[_.-]?(?:key|secret)"""
    r"""|(?P<k>[a-z0-9]+)[_.-]key)(?P=q)"""
    r"""(?:[ \t]+value[ \t]*=[ \t]*(?P<v>"[^"\n]{1,2000}"|'[^'\n]{1,2000}')|[ \t]*>(?P<t>[^<\n]{1,2000})<)"""
)


def _xml_named_value(match: re.Match[str]) -> bool:
    value = match.group("t") if match.group("v") is None else _unquote(match.group("v"))[0]
    if not _assigned_value_is_secret(value.strip()):
        # A password's value may be a plain word (``<property name="password" value="tiger"/>``).
        return match.group("n").lower().startswith("p") and _plain_password(value.strip())
    # ``<string name="hockeyapp_key">`` (an Android resource), ``<add key="mapbox_key" .../>``: a key
    # named after its service, unless the word before ``key`` names a data-structure key.
    if match.group("k") is not None:
        return match.group("k").lower() not in _NOT_CREDENTIAL_KEYS and _key_shaped(value.strip())
    name = match.group("n").lower()
    return name.startswith("p") or _token_shaped(value) or _key_shaped(value)


# ODBC quotes a value that holds ``;`` in braces: ``Pwd={pa;ss}``.
_ODBC_BRACED = r"(?<![a-z0-9_])(?:pwd|password)[ \t]*=[ \t]*\{(?P<v>[^{}\n]{1,200})\}"
# Oracle's JDBC URL keeps the SQL*Plus form: ``jdbc:oracle:thin:USER/PASSWORD@host:1521:SID``.
_ORACLE_JDBC = re.compile(r"jdbc:oracle:(?:thin|oci8?|kprb):[\w$#.-]+/(?P<v>[^\s@/\"']+)@", re.IGNORECASE)
# A ``.pgpass`` line: ``hostname:port:database:username:password``, the whole line.
# The pattern starts at the port (a literal ``:`` is searched for quickly); `_pgpass_line` reads the
# host back to the start of the line.
_PGPASS_LINE = re.compile(r":(?:\d{1,5}|\*):[\w.*-]+:[A-Za-z*][\w.*@-]*:(?P<v>\S+)[ \t]*(?m:$)")
_PGPASS_HOST = re.compile(r"[ \t]*(?=[^:\n]*[A-Za-z.*])(?:[\w.*-]+|\[[0-9A-Fa-f:]+\])")


def _pgpass_line(match: re.Match[str]) -> bool:
    text, start = match.string, match.start()
    line_start = text.rfind("\n", 0, start) + 1
    host = _PGPASS_HOST.fullmatch(text, line_start, start)
    # A log line can take this shape too (``app:1234:main:INFO:Started_server``): the last field must
    # read as a password, with a letter and a digit or a symbol.
    return host is not None and _password_like(match.group("v"))


# ---------------------------------------------------------------------------------------------
# Round 5: SQL, JWKs, option constants, token flags, defaults of environment lookups, formats
# ---------------------------------------------------------------------------------------------

_OPENAI_MARKER = re.compile(r"[A-Za-z0-9_-]*[A-Za-z0-9]{16}T3BlbkFJ[A-Za-z0-9]{16}[A-Za-z0-9_-]*")
# SQL that sets a password: ``CREATE USER x IDENTIFIED BY 'pw'`` (Oracle, MySQL; ``IDENTIFIED WITH
# plugin BY``, ``IDENTIFIED ... AS '<hash>'``), ``CREATE ROLE x WITH PASSWORD 'pw'`` (PostgreSQL),
# ``SET PASSWORD FOR x = 'pw'``. Bind variables (``:pw``, ``?``, ``%s``) and references pass.
_SQL_PASSWORD = (
    r"""(?:(?:create|alter)[ \t]+(?:user|role|login)[ \t][^\n;]{0,100}?"""
    r"""(?:\bidentified[ \t]+(?:with[ \t]+['"`]?[a-z0-9_]+['"`]?[ \t]+)?(?:by|as)(?:[ \t]+password)?[ \t]"""
    r"""|\bpassword(?:[ \t]*=)?[ \t])|\bset[ \t]+password\b[^\n;=]{0,80}=(?:[ \t]*password[ \t]*\()?)"""
    r"""[ \t]*\\?(?P<v>'[^'\n]{1,200}'|"[^"\n]{1,200}"|[^\s'";\\)]{1,200})"""
)


def _sql_password(match: re.Match[str]) -> bool:
    value, _ = _unquote(match.group("v"))
    if value[:1] in ":?@%&$" or value.lower() in ("null", "password", "externally", "globally", "values"):
        return False
    return _typed_password(value) and not _METAVARIABLE.fullmatch(value)


# A JSON Web Key with its private part: ``d`` (RSA, EC, OKP), the RSA primes and CRT values, or
# ``k`` (a symmetric key). A public JWK has ``n``, ``e``, ``x``, ``y`` only.
_JWK_PRIVATE = re.compile(r'"(?:d|p|q|dp|dq|qi|k)"[ \t]*:[ \t]*"(?P<v>[A-Za-z0-9_-]{16,})"')
# An option constant named after a credential, then a string literal (``curl_easy_setopt(curl,
# CURLOPT_USERPWD, "user:pw")``, ``CURLOPT_XOAUTH2_BEARER``, ``cfg.set(DB_PASSWORD, "...")``): the
# name in capitals, as constants are written.
_CONSTANT_PAIR = re.compile(
    r"(?P<n>PASSWORD|PASSWD|PWD|SECRET|TOKEN|BEARER|API_?KEY)(?:_[0-9])?[ \t]*,[ \t]*"
    r"""(?P<v>"[^"\n]{1,2000}"|'[^'\n]{1,2000}')"""
)


def _constant_pair(match: re.Match[str]) -> bool:
    text, start = match.string, match.start()
    name = text[_name_start(text, start, "_") : match.end("n")]
    if not name.isupper() or (start > 0 and text[start - 1] in "\"'."):
        return False
    value = _unquote(match.group("v"))[0]
    if not _assigned_value_is_secret(value):
        return False
    return "P" in match.group("n") or _token_shaped(value) or _key_shaped(value)


# Long flags that take a token, a secret or an API key (``--token X``, ``--oauth2-bearer X``,
# ``--api-key=X``): a word is not one (``--token-file``, ``--secret-name`` end in another word).
_CLI_TOKEN_FLAG = re.compile(
    r"--(?:[a-z0-9]+-)*(?:token|secret|api-?key|access-key|secret-key|bearer|oauth2-bearer)(?:=|[ \t]+)"
    r"""(?P<v>'[^'\n]{1,500}'|"[^"\n]{1,500}"|[^\s'"]{1,500})"""
)


def _cli_token_flag(match: re.Match[str]) -> bool:
    value = _unquote(match.group("v"))[0]
    return not value.startswith("-") and (_credential_like(value) or _opaque_token(value))


# The default of an environment lookup is the credential when the variable, or the name it is
# assigned to, is one: ``os.getenv("DB_PASSWORD", "...")``, ``os.environ.get("TOKEN") or "..."``,
# ``SECRET := getenv("X", "...")``.
_ENV_DEFAULT = re.compile(
    r"""(?:getenv|environ\.get|env\.get|env)\([ \t]*(?P<q>["'])(?P<name>[\w.-]{1,100})(?P=q)[ \t]*"""
    r"""(?:,[ \t]*(?:default[ \t]*=[ \t]*)?|\)[ \t]*(?:or|\|\||\?\?)[ \t]*)(?P<v>"[^"\n]{1,500}"|'[^'\n]{1,500}')"""
)
_CREDENTIAL_NAME = re.compile(
    r"(?i:passwor[dt]|passwd|pwd|pass(?![a-z])|secret|token|api_?key|private_?key|access_?key|credential)"
)


def _env_default(match: re.Match[str]) -> bool:
    text, start = match.string, match.start()
    line_start = text.rfind("\n", 0, start) + 1
    named = _CREDENTIAL_NAME.search(match.group("name")) or _CREDENTIAL_NAME.search(text, line_start, start)
    return named is not None and _quoted_secret(match.group("v"))


# Azure's identifiable keys (storage, Cosmos DB, AI services, container registries, ...): 52
# characters, then Azure's signature ``JQQJ9`` and 20 to 30 more (the key's type and a checksum).
_AZURE_IDENTIFIABLE = re.compile(
    r"(?<![A-Za-z0-9+/])(?P<v>[A-Za-z0-9+/]{52}JQQJ9[A-Za-z0-9+/]{19,29}={0,2})(?![A-Za-z0-9+/=])"
)
# A Kubernetes Secret's ``.dockerconfigjson`` or ``.dockercfg`` item: base64 of a Docker config, which
# holds registry credentials.
_DOCKER_CONFIG_ITEM = re.compile(
    r"""\.docker(?:configjson|cfg)["']?[ \t]*:[ \t]*["']?(?P<v>[A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])"""
)
# Mailgun's keys since 2023: 32 hex, then two groups of 8 hex.
_MAILGUN_KEY_V2 = re.compile(r"(?<![A-Za-z0-9_-])[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8}(?![A-Za-z0-9_-])")
# X (Twitter) app-only bearer tokens: 22 ``A`` then the token, URL-encoded.
_X_BEARER = re.compile(r"(?<![A-Za-z0-9])A{20,22}(?P<v>[B-Za-z0-9%][A-Za-z0-9%]{59,})")
# A Salesforce access token: the org id (``00D`` and 12 or 15 characters), ``!``, then the session.
_SALESFORCE_TOKEN = re.compile(r"(?P<v>00D[A-Za-z0-9]{12,15}![A-Za-z0-9._]{80,})")
# ``#define DB_PASSWORD "..."``: a C macro named after a credential.
_C_DEFINE = re.compile(
    r"#define[ \t]+\w*(?i:passwor[dt]|passwd|pwd|secret|token|api_?key)\w*[ \t]+"
    r"""(?P<v>"[^"\n]{1,200}"|'[^'\n]{1,200}'|[^\s"'(][^\s"']{0,199})"""
)
# An Authorization header's value with no scheme or with any scheme that carries a token as it is
# (``"authorization": "<token>"``, ``Authorization: NTLM <base64>``, ``Negotiate``, ``token``, and
# the schemes of single services: ``SSWS``, ``GenieKey``, ``Splunk``, ``Klaviyo-API-Key``, ``Bot``).
# Basic and Digest carry something else (``user:password`` in base64, ``username="..."``): rules
# of their own read them.
_AUTHORIZATION_VALUE = (
    r"""authorization\\?["']?[ \t]*[:=][ \t]*\\?["']?"""
    r"""(?:(?P<s>(?!basic\b|digest\b)[a-z][a-z0-9-]{1,30})[ \t]+)?"""
    r"""(?P<v>[a-z0-9._~+/=-]{16,})(?![a-z0-9._~+/=-])"""
)


def _authorization_value(match: re.Match[str]) -> bool:
    """A token after ``Authorization:``: opaque, or a UUID after a scheme (Splunk's, OpsGenie's)."""
    value = match.group("v")
    if _UUID.fullmatch(value):
        return match.group("s") is not None and _varied(value.replace("-", ""))
    return _opaque_token(value)


# A Facebook app access token: ``<app id>|<app secret>``.
_FACEBOOK_APP_TOKEN = re.compile(r"(?<![0-9])[0-9]{15,16}\|(?P<v>[A-Za-z0-9_-]{27,32})(?![A-Za-z0-9_-])")
# A private key's body without its BEGIN/END lines: three or more lines of base64 as PEM wraps it
# (64 characters, the last line shorter). The first line of a key is found by its DER
# (`_bare_pem_body`); these are the lines after it, which say nothing of their own but their width
# and randomness. Certificates and public keys start with their header or ``MII``.
_PEM_BODY_LINES = re.compile(
    r"(?m:^)[ \t]*(?P<v>[A-Za-z0-9+/]{64}(?:\r?\n[ \t]*[A-Za-z0-9+/]{64}){1,200}\r?\n[ \t]*[A-Za-z0-9+/]{4,64}={0,2})[ \t]*(?m:$)"
)


def _pem_body_lines(match: re.Match[str]) -> bool:
    body = match.group("v")
    if body.startswith("MII") or "-----" in match.string:
        return False
    joined = re.sub(r"\s", "", body)
    return _looks_random(joined) and not _decodes_to_text(joined[:64])


_RULES: tuple[_Rule, ...] = (
    # This project's own keys (``store/keys.py``): ``mmk_<prefix>_<secret>``.
    _Rule(
        "memory_mcp_key",
        re.compile(rf"{KEY_SCHEME}_[A-Za-z0-9]{{{PREFIX_LEN}}}_(?P<v>[A-Za-z0-9_-]{{16,}})"),
        _value(_varied),
        not_after=_WORD,
    ),
    # Vendor formats. The service-account JSON comes before the PEM rule: it embeds a private key,
    # and "service-account key" is the better name for it.
    _Rule(
        "gcp_service_account",
        re.compile(r'"private_key_id"\s*:\s*"[0-9a-f]{32,40}"|"private_key"\s*:\s*"-----BEGIN'),
        hints=('"private_key',),
    ),
    _Rule(
        "aws_access_key",
        re.compile(r"(?:AKIA|ASIA|ABIA|ACCA)(?P<v>[A-Z0-9]{16})(?![A-Za-z0-9_])"),
        # Documentation ids (``...EXAMPLE``) included; masks such as AKIAXXXXXXXXXXXXXXXX are not keys.
        _value(lambda v: len(set(v)) >= 6 or _test_key(v)),
        not_after=_WORD,
    ),
    _Rule(
        "aws_secret_key",
        re.compile("|".join(map(re.escape, _AWS_DOCUMENTATION_SECRETS))),
        hints=("examplekey",),
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
    # A storage account key is 64 random bytes, 88 characters of base64: after the name of one
    # (``AccountKey``, ``storageAccountKey``, ``-storagekey``), also on the next line.
    _any_case(
        "azure_storage_key",
        rf"(?:account|storage)[ _-]?key[\s\S]{{0,80}}?(?<![A-Za-z0-9+/]){_B64}{{86}}==",
        _always,
        anchors=("account", "storage"),
    ),
    _Rule(
        "azure_sas_token",
        # After ``?`` or ``&`` in a URL, or starting a value or the text (``sv=...`` as a query alone).
        re.compile(r"sv=\d{4}-\d\d-\d\d&\S*?\bsig=[A-Za-z0-9%+/]{30,}"),
        lambda m: m.start() == 0 or m.string[m.start() - 1] in "?&=\"' \t\n",
        hints=("sig=",),
    ),
    _Rule(
        "github_token",
        # GitHub App installation tokens in their newer form carry a JWT: ``ghs_<app id>_<JWT>``.
        re.compile(
            r"(?P<v>gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{50,}"
            r"|ghs_[0-9]{1,12}_ey[A-Za-z0-9_-]{10,}\.ey[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{16,})(?![A-Za-z0-9_])"
        ),
        _value(_varied),
        not_after=_WORD,
    ),
    _prefix_rule("gitlab_token"),
    _Rule(
        "slack_webhook",
        re.compile(
            r"https://hooks\.slack\.com/(?:services|workflows|triggers)/T[A-Za-z0-9_]+/(?P<v>[A-Za-z0-9_/]{20,})"
        ),
        # The last part of the path is the secret: filled with ``X`` it is Slack's documented mask.
        # Slack writes its ids in capitals; a hand-made one (a test's, a tutorial's) may not, and the
        # host and path say what it is all the same.
        _value(lambda v: _varied(v.rstrip("/").rsplit("/", 1)[-1])),
    ),
    _Rule(
        "discord_webhook",
        re.compile(
            r"https://(?:(?:canary|ptb)\.)?discord(?:app)?\.com/api/(?:v\d+/)?webhooks/\d{17,20}/"
            r"(?P<v>[A-Za-z0-9_-]{60,})"
        ),
        _value(_varied),
        hints=("discord",),
    ),
    _Rule(
        "teams_webhook",
        re.compile(
            r"https://[A-Za-z0-9-]+\.webhook\.office\.com/webhookb2/[0-9a-fA-F-]{36}@[0-9a-fA-F-]{36}/"
            r"IncomingWebhook/[0-9a-fA-F]{32}/"
            r"|https://outlook\.office(?:365)?\.com/webhook/[0-9a-fA-F-]{36}@[0-9a-fA-F-]{36}/IncomingWebhook/"
            r"[0-9a-fA-F]{32}/"
            # Power Automate workflows, which replace the Office 365 connectors: the sig parameter is the key.
            r"|https://[A-Za-z0-9.-]+\.(?:logic\.azure\.com|api\.powerplatform\.com)(?::\d+)?/[^\s]*?"
            r"[?&]sig=[A-Za-z0-9_%-]{20,}"
        ),
        hints=("webhook", "logic.azure", "powerplatform"),
    ),
    _Rule(
        "slack_token",
        re.compile(
            r"(?P<v>xox[abposre]-[0-9A-Za-z-]{10,}|xoxe\.xox[bp]-[0-9A-Za-z-]{10,}|xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+)"
        ),
        _value(_varied),
        not_after=_WORD_DASH,
    ),
    _Rule(
        "stripe_key",
        re.compile(
            r"(?:(?:sk|rk)_(?:live|test|prod)_(?=[0-9A-Za-z]{16})|whsec_(?=[0-9A-Za-z]{24}))(?P<v>[0-9A-Za-z]+)"
        ),
        # Test-mode keys too: they open the account's test data and settings through the API.
        _value(lambda v: _varied(v) or _test_key(v)),
        hints=("k_live_", "k_test_", "k_prod_", "whsec_"),
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
        # ``T3BlbkFJ`` ("OpenAI" in base64) in the middle is OpenAI's own marker: with it the key is in
        # OpenAI's exact format, and refused however its two halves were written.
        _value(
            lambda v: (
                _varied(v)
                and (_looks_random(_TOKEN_SEPARATORS.sub("", v)) or _OPENAI_MARKER.fullmatch(v) is not None)
            )
        ),
        not_after=_WORD_DASH,
    ),
    _Rule(
        "google_api_key",
        re.compile(r"(?P<v>AIza[0-9A-Za-z_-]{35})(?![A-Za-z0-9_-])"),
        _value(_varied),
        not_after=_WORD_DASH,
    ),
    _Rule(
        "google_oauth",
        re.compile(r"(?P<v>GOCSPX-[A-Za-z0-9_-]{24,}|ya29\.[A-Za-z0-9_-]{30,})"),
        _value(_varied),
        hints=("gocspx-", "ya29."),
        not_after=_WORD_DASH,
    ),
    _Rule(
        "azure_client_secret",
        re.compile(r"(?P<v>[A-Za-z0-9_~.-]{3}\dQ~[A-Za-z0-9_~.-]{30,40})(?![A-Za-z0-9_~.-])"),
        _value(_varied),
        hints=("q~",),
        not_after=_WORD_DASH + "~.",
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
    _prefix_rule("service_token"),
    # Tailscale: ``tskey-<type>-<key id>-<secret>`` (``api``, ``auth``, ``client``, ``scim``, ``webhook``
    # and types to come; ``tskey-<id>-<secret>`` before types). The prefix is its own, so the key
    # counts wherever it starts, also glued to a name (``MY_tskey-...``).
    _Rule(
        "service_token",
        re.compile(
            r"tskey-(?:[a-z]{2,12}-)?(?P<id>[A-Za-z0-9]{6,})-(?P<v>[A-Za-z0-9]{16,})(?![A-Za-z0-9_-])"
        ),
        lambda m: _varied(m.group("id") + m.group("v")) or _test_key(m.group("v")),
        hints=("tskey-",),
        not_after=string.ascii_letters,
    ),
    _Rule("service_token", _TELEGRAM, _value(_varied), hints=(":aa",), not_after=_WORD_DASH),
    _Rule(
        "service_token",
        _TELEGRAM_NAMED,
        _telegram_named,
        hints=("telegram", "tgram"),
        anchors=(":",),
    ),
    _any_case("service_token", _VAULT_LEGACY, _value(lambda v: _opaque_token(v[2:])), anchors=("vault",)),
    _Rule("service_token", _TERRAFORM_TOKEN, _value(_varied), hints=(".atlasv1.",)),
    _any_case(
        "service_token",
        _ACL_TOKEN,
        _acl_token,
        anchors=("x-consul-token", "x-nomad-token", "consul", "nomad"),
    ),
    _Rule("service_token", _MAILCHIMP, hints=("-us",), in_tokens=True),
    _Rule("service_token", _TABLEAU, _value(_varied), hints=("==:",)),
    _Rule("service_token", _MAXMIND, _value(_varied), hints=("_mmk",), in_tokens=True),
    _Rule("discord_token", _DISCORD_BOT_TOKEN, _discord_bot_token, in_tokens=True),
    _any_case(
        "vendor_api_key",
        _VENDOR_KEY,
        _vendor_key,
        # "new" and "dd" start too many words to be worth a search: their hints are longer.
        hints=(*(h for h in _VENDOR_HINTS if h not in ("new", "dd")), "relic", "dd_", "dd-", "dd ", "ddap"),
        not_after=_WORD,
        anchors=_VENDOR_HINTS,
    ),
    # Rare words: hinted, then searched (a search for a literal opening runs in C).
    _any_case("vendor_api_key", _SOFTLAYER_KEY, _softlayer_key, hints=("softlayer",)),
    _any_case("service_token", _SONAR_LOGIN, _value(_varied), hints=("sonar",), anchors=("sonar",)),
    _any_case("secret_assignment", _HEX_KEY_IN_PROSE, _hex_key_in_prose, anchors=_HEX_KEY_ANCHORS),
    _Rule(
        "secret_assignment",
        re.compile(_VAULT_UNSEAL),
        _value(lambda v: _looks_random(v.rstrip("=").replace("+", "").replace("/", ""))),
        not_after=_WORD,
        anchors=("unseal",),
    ),
    _any_case("vendor_api_key", _SNYK_TOKEN, _snyk_token, hints=("snyk",)),
    _Rule("vendor_api_key", _MAILGUN_KEY, _value(_varied), hints=("key-",), not_after=_WORD_DASH + "/.:"),
    _Rule("service_token", _BRAINTREE_TOKEN, _value(_varied), hints=("access_token$",), not_after=_WORD),
    # ``ZXIvYXdz`` and ``YXdz`` ("er/aws", "aws") are in three openings, ``b3JpZ2lu`` ("origin") in the fourth.
    _Rule(
        "service_token", _AWS_SESSION_TOKEN, _session_token, hints=("yxdz", "b3jpz2lu"), not_after=_B64[1:-1]
    ),
    _any_case(
        "service_token",
        _AWS_SESSION_TOKEN_NAMED,
        _session_token,
        hints=("session", "security"),
        anchors=("aws", "x-amz-security-token"),
    ),
    _Rule(
        "huggingface_token",
        re.compile(r"(?P<v>(?:hf|api_org)_[A-Za-z0-9]{30,40})(?![A-Za-z0-9_])"),
        _value(lambda v: _varied(v) and _shannon_entropy(v.split("_")[-1]) >= MIN_ENTROPY_BITS),
        hints=("hf_", "api_org_"),
        not_after=_WORD,
    ),
    # Any vendor's identifiable token (`_IDENTIFIABLE_TOKEN`), after the vendors that are named.
    _Rule(
        "service_token",
        _IDENTIFIABLE_TOKEN,
        _identifiable_token,
        not_after=_WORD_DASH,
        anchors=tuple(string.ascii_lowercase),
        in_tokens=True,
    ),
    # Structural formats.
    _Rule(
        "jwt",
        # The signature may be missing: ``header.payload.`` (``"alg": "none"``) or ``header.payload``.
        re.compile(
            r"(?P<h>ey[A-Za-z0-9_-]{10,})\s*\.\s*(?P<p>ey[A-Za-z0-9_-]{10,})"
            r"(?:\s*\.\s*(?P<s>[A-Za-z0-9_-]{16,})|\.?)(?![A-Za-z0-9_-])"
        ),
        _jwt,
        not_after=_WORD_DASH,
    ),
    _Rule(
        "jwt",
        # An encrypted JWT (JWE, RFC 7516): header, encrypted key (empty with ``"alg": "dir"``), IV,
        # ciphertext and tag; NextAuth's session cookie is one. The header must name ``alg``.
        re.compile(
            r"(?P<h>ey[A-Za-z0-9_-]{10,})\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"
            r"\.[A-Za-z0-9_-]{16,}(?![A-Za-z0-9_.-])"
        ),
        lambda match: "alg" in (_json_object(match.group("h")) or {}),
        not_after=_WORD_DASH,
        hints=("ey",),
    ),
    _Rule(
        "private_key",
        # Key material after the header, also when each line carries a quote or comment marker
        # (``> `` in a quoted mail, ``# `` or ``// `` in code, ``"...\\n" +`` in a string).
        # Or the header alone on its line at the end of the text: a key whose paste was cut off after
        # its first line (or whose body follows in the next memory). Named in prose or in backticks,
        # or with anything but key material after it, the header is about the format and passes.
        re.compile(
            r"-----BEGIN[A-Z0-9 ]{0,20} PRIVATE KEY(?: BLOCK)?-----(?:\\[nr]|\s|[>#*;\"'+]|//)*"
            r"(?:Proc-Type:|Version:|(?P<v>[A-Za-z0-9+/=]{20})|(?P<end>\Z))"
        ),
        _pem_header,
    ),
    _Rule(
        "private_key",
        # A whole block, BEGIN to END with the body on lines of its own: the frame exists only to
        # hold a key, so whatever it holds is one, unless it is a stand-in (``...``, ``<key>``,
        # ``xxxx``, ``REDACTED``). A sentence that names both lines keeps them on one line.
        re.compile(
            r"-----BEGIN[A-Z0-9 ]{0,20} PRIVATE KEY(?: BLOCK)?-----[ \t]*(?:\r?\n|\\[rn])"
            r"(?P<v>[^-]{1,10000}?)-----END[A-Z0-9 ]{0,20} PRIVATE KEY"
        ),
        _value(_pem_body),
        hints=("-----end",),
    ),
    _Rule(
        "private_key",
        re.compile(
            r"AGE-SECRET-KEY-1[0-9A-Z]{58}|PuTTY-User-Key-File-\d+:[^\n]*\n(?:[^\n]*\n){0,40}?Private-Lines:"
        ),
        hints=("age-secret-key-1", "putty-user-key-file"),
    ),
    _Rule(
        "private_key",
        # "-----BEGIN" in base64, as Kubernetes Secret data and CI variables hold a PEM file.
        re.compile(r"LS0tLS1CRUdJTi[A-Za-z0-9+/=\r\n]{40,}"),
        _base64_pem,
        not_after=_B64[1:-1],
    ),
    _Rule(
        "private_key",
        re.compile(r"b3BlbnNzaC1rZXktdjE[A-Za-z0-9+/=\r\n]{100,}"),
        hints=("b3blbnnzac1rzxktdje",),
    ),
    # Password hashes: crypt(5) and its kin, then pwdump lines.
    # A digit may come right before a tag: Django writes ``argon2$argon2id$...``.
    _Rule(
        "password_hash",
        _PASSWORD_HASH,
        _password_hash,
        not_after=string.ascii_letters + "_",
        anchors=_PASSWORD_HASH_OPENINGS,
    ),
    _Rule("password_hash", _PWDUMP, _value(lambda v: len(set(v.lower())) >= 8), hints=(":::",)),
    _Rule("webhook_url", _HOOK_URL, _hook_url, hints=("/hooks/", "/webhook", "/catch/", "/key/")),
    _Rule("webhook_url", _URL_SECRET_PARAM, _url_secret_param, hints=("?", "&")),
    _Rule(
        "connection_string_password",
        # The user may be an e-mail address (``smtps://name@gmail.com:PASSWORD@smtp.gmail.com``).
        re.compile(r"://(?:[^\s:/?#@]+@)?[^\s:/?#@]*:(?P<v>[^\s/?#@]+)@[^\s/?#@]"),
        _url_userinfo,
        hints=("://",),
    ),
    _Rule(
        "connection_string_password", _ORACLE_JDBC, _value(_assigned_value_is_secret), hints=("jdbc:oracle:",)
    ),
    _Rule("connection_string_password", _PGPASS_LINE, _pgpass_line),
    _any_case("connection_string_password", _ODBC_BRACED, _value(_assigned_value_is_secret), hints=("={",)),
    _any_case(
        "basic_auth",
        rf"authorization[\"']?\s*[:=]\s*[\"']?basic\s+(?P<v>{_B64}{{8,}}={{0,2}})",
        _basic_auth_decodes,
        hints=("authorization",),
    ),
    # ``.npmrc``'s ``_auth``: base64 of ``user:password`` (a plain value works as well), per registry
    # (``//registry.example.com/:_auth=``) or set through ``NPM_CONFIG__AUTH``.
    _any_case(
        "basic_auth",
        r"""_auth[ \t]*=[ \t]*(?P<v>"[^"\n]{1,500}"|'[^'\n]{1,500}'|[^\s"'#;]{1,500})""",
        _value(_quoted_secret),
        hints=("_auth",),
        not_after=string.ascii_letters + string.digits + "-",
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
        r"bearer:?\s+(?P<v>[A-Za-z0-9._~+/-]{20,}=*)",
        # A UUID after "Bearer" is a token too (Heroku and older HubSpot keys are UUIDs), and so is
        # hex of 32 or more (GitHub's classic tokens, Particle's, many self-hosted services').
        _value(
            lambda v: (
                _opaque_token(v)
                or ((_UUID.fullmatch(v) is not None or _BEARER_HEX.fullmatch(v) is not None) and _varied(v))
            )
        ),
        hints=("bearer",),
        not_after=string.ascii_letters,
    ),
    # Command lines, then assignments, then the prose forms of a password.
    _Rule("cli_password", _CLI_FLAG, _cli_short_flag, anchors=(" -", "\t-", "\n-")),
    _Rule("cli_password", _NET_USE, _net_use, hints=("net",)),
    _Rule(
        "cli_password",
        _POSITIONAL_PASSWORD,
        _positional_password,
        hints=("htpasswd", "sqlplus", "chpasswd", "freerdp", "wmic", "cmdkey", "schtasks", "runas"),
    ),
    *(
        _Rule(
            "cli_password",
            pattern,
            _value(lambda v: _typed_password(_unquote(v)[0])),
            hints=hints,
            not_after=_WORD,
            anchors=anchors,
        )
        for pattern, hints, anchors in _TYPED_PASSWORD_COMMANDS
    ),
    _Rule("cli_password", _CLI_LONG_FLAG, _cli_long_flag, not_after=_WORD_DASH),
    _any_case(
        "password_assignment",
        rf"(?:{_PASSWORD_NAMES}){_PASSWORD_NAME_END}{_ASSIGNED_VALUE}",
        _not_a_route(_password_assignment),
        anchors=_PASSWORD_ANCHORS,
    ),
    _any_case(
        "password_assignment",
        rf"\b(?:{_PASSWORD_WORDS}|pw)\b[^\n.]{{0,40}}?{_PROSE_VERB}{_PROSE_VALUE}",
        _not_a_route(_prose_value(_password_like, plain_quoted=True)),
        anchors=_PASSWORD_ANCHORS,
    ),
    # A Dockerfile's ``ENV NAME value`` (the form without ``=``) for a password's name.
    _any_case(
        "password_assignment",
        _DOCKERFILE_ENV,
        _value(_plain_or_strong),
        hints=("env ", "arg ", "env\t", "arg\t"),
        not_after=_WORD_DASH,
        anchors=("env", "arg"),
    ),
    # ``echo X | docker login ... --password-stdin``: what is echoed is the password.
    _any_case(
        "cli_password",
        _ECHO_STDIN,
        _value(_plain_or_strong),
        hints=("--password-stdin",),
        anchors=("echo", "printf"),
    ),
    _any_case(
        "password_assignment",
        _PASSWORD_SETTER,
        _value(_plain_or_strong),
        hints=("password(", "passwd(", "pwd(", "passphrase(", "passwort("),
        anchors=("set", "with", "use", "password", "passwd", "passphrase"),
    ),
    _any_case(
        "password_assignment",
        _LOGIN_CALL,
        _value(_plain_or_strong),
        hints=("login", "basicauth", "auth=", "auth ="),
        anchors=(".login", "basicauth", "auth"),
    ),
    _any_case(
        "password_assignment",
        _CREDENTIAL_CONSTRUCTOR,
        _value(_plain_or_strong),
        hints=("credential", "passwordauthentication", "directoryentry", "opendsobject"),
        anchors=(
            "credential(",
            "credentials(",
            "credential (",
            "credentials (",
            "passwordauthentication",
            "directoryentry",
            "opendsobject",
        ),
    ),
    # A ``.netrc`` entry: ``machine HOST login USER password PASSWORD``, on one line or several.
    _any_case("password_assignment", _NETRC, _value(_typed_password), anchors=("machine",)),
    # "Passwort Sommer2024!", "şifre X olarak değişti": a password word right before the value.
    _any_case(
        "password_assignment",
        rf"\b(?:{_PASSWORD_WORDS}|pw)[ \t]+(?P<v>\"[^\"\n]{{6,100}}\"|'[^'\n]{{6,100}}'|[^\s\"'`,;]{{8,100}})",
        _prose_value(_credential_like),
        anchors=_PASSWORD_ANCHORS,
    ),
    _Rule("password_assignment", _CJK_PASSWORD, _cjk_value, anchors=_CJK_PASSWORD_WORDS),
    _any_case("password_assignment", _PASSWORD_WORD, _value_before, anchors=_PASSWORD_ANCHORS),
    _Rule(
        "password_assignment",
        re.compile(
            r"\bparol[aă](?:[ \t][^\n.:]{0,30}?)?(?:[ \t]+este|[ \t]*:)[ \t]+" + _PROSE_VALUE, re.IGNORECASE
        ),
        _prose_value(_password_like),
        hints=("parol",),
    ),
    _Rule(
        "password_assignment",
        _USER_SLASH_PASSWORD,
        _value(_credential_like),
        anchors=(
            "login",
            "credential",
            "credencia",
            "zugang",
            "anmeldedaten",
            "identifiants",
            "acceso",
            "acesso",
        ),
    ),
    _any_case("secret_assignment", _FRONT_END_VARIABLE, _front_end_variable, anchors=_FRONT_END_PREFIXES),
    # PowerShell's ``ConvertTo-SecureString "<password>" -AsPlainText -Force``: the literal is the password.
    _any_case(
        "password_assignment",
        # Without ``-AsPlainText`` the literal is an encrypted standard string, which the account that
        # made it decrypts: a credential too. Flags may come first, quotes may be escaped.
        r"""convertto-securestring[ \t]+(?:-[a-z]+[ \t]+){0,3}\\?(?P<v>"[^"\n\\]{1,200}"|'[^'\n]{1,200}'|[^\s"'|;)\\-][^\s"'|;)]{0,199})""",
        _value(_quoted_secret),
        anchors=("convertto-securestring",),
    ),
    _Rule(
        "password_assignment",
        _CONNECT_CALL,
        _value(_quoted_secret),
        anchors=("mysql_connect", "mysqli_connect", "new", "getconnection"),
    ),
    _any_case(
        "secret_assignment", _XML_NAMED_VALUE, _xml_named_value, anchors=("key=", "name=", "key =", "name =")
    ),
    _any_case(
        "secret_assignment",
        rf"(?:secrete?|token|credentials?|secret_key_base|{_QUALIFIED_KEY}){_NAME_END_AND_SEPARATOR}{_ASSIGNED_VALUE}",
        _token_assignment,
        anchors=_SECRET_ANCHORS,
    ),
    _any_case(
        "secret_assignment",
        rf"(?:\b(?:{_SECRET_NAMES})|{_QUALIFIED_KEY})\b[^\n.]{{0,40}}?{_PROSE_VERB}{_PROSE_VALUE}",
        _prose_value(_credential_like),
        anchors=_SECRET_ANCHORS,
    ),
    # ``Header.Set("X-Api-Key", "...")``, ``{ "AccountKey", "..." }``, ``put("password", "...")``:
    # a name and its value as two string literals side by side.
    _any_case("secret_assignment", _LITERAL_PAIR, _literal_pair, hints=('",', "',", '" ,', "' ,")),
    # ``if ("..." == password)``: the literal first, then the credential it is compared with.
    _any_case(
        "secret_assignment",
        r"""(?P<v>"[^"\n]{1,200}"|'[^'\n]{1,200}')[ \t]*[!=]==?[ \t]*[a-z0-9_.]*?"""
        rf"(?:{_COMPARED_NAMES})(?:[_-]?[0-9]{{1,2}})?(?![a-z0-9_-])",
        _value(_quoted_secret),
        hints=("==", "!="),
    ),
    # ``softlayer_key = ...``, ``ibm-iam-key: ...``, ``--softlayer-api-key ...``: a key named after
    # its service gets a key-shaped value, random or not.
    _any_case("secret_assignment", _NAMED_KEY, _named_key, anchors=("_key", "-key")),
    # ``boxKEY 0123...``, ``bugsnag secret <uuid>``, ``dd_secret_key-3c0c...``: a credential's name,
    # glued to a vendor's or after it, and a key-shaped value.
    _any_case("secret_assignment", _NAME_THEN_VALUE, _name_then_value, anchors=_CREDENTIAL_NAME_WORDS),
    # ``fastlyKey = "..."``, ``const sumoKey1 = '...'``: the same in camelCase, with a random value.
    _Rule("secret_assignment", _CAMEL_KEY, _camel_key, anchors=("key",)),
    _any_case(
        "password_assignment",
        _SQL_PASSWORD,
        _sql_password,
        hints=("password", "identified"),
        anchors=("create", "alter", "set"),
    ),
    _Rule(
        "private_key", _JWK_PRIVATE, _value(lambda v: _varied(v) and not _is_placeholder(v)), hints=('"kty"',)
    ),
    _Rule(
        "secret_assignment",
        _CONSTANT_PAIR,
        _constant_pair,
        hints=(',"', ', "', ",'", ", '"),
        anchors=("password", "passwd", "pwd", "secret", "token", "bearer", "api_key", "apikey"),
    ),
    _Rule("cli_password", _CLI_TOKEN_FLAG, _cli_token_flag, hints=("--",), not_after=_WORD_DASH),
    _Rule(
        "secret_assignment",
        _ENV_DEFAULT,
        _env_default,
        hints=("env",),
        anchors=("getenv", "environ.get", "env.get", "env("),
    ),
    _Rule("azure_storage_key", _AZURE_IDENTIFIABLE, _value(_varied), hints=("jqqj9",)),
    _Rule(
        "basic_auth",
        _DOCKER_CONFIG_ITEM,
        _value(lambda v: _varied(v) and not _is_placeholder(v)),
        hints=(".docker",),
    ),
    _Rule("vendor_api_key", _MAILGUN_KEY_V2, anchors=tuple("0123456789abcdef"), in_tokens=True),
    _Rule(
        "bearer_token",
        _X_BEARER,
        _value(lambda v: _opaque_token(re.sub("%[0-9A-Fa-f]{2}", "", v))),
        hints=("aaaaaaaaaaaaaaaaaaaa",),
    ),
    _Rule("service_token", _SALESFORCE_TOKEN, _value(_varied), hints=("00d",), not_after=_WORD),
    _Rule(
        "password_assignment",
        _C_DEFINE,
        _value(_quoted_secret),
        hints=("#define",),
    ),
    _any_case("bearer_token", _AUTHORIZATION_VALUE, _authorization_value, anchors=("authorization",)),
    _Rule(
        "service_token",
        _FACEBOOK_APP_TOKEN,
        _value(lambda v: _looks_random(v.replace("-", "").replace("_", ""))),
        hints=("|",),
    ),
    _Rule("private_key", _PEM_BODY_LINES, _pem_body_lines, hints=("\n",)),
    # ``<password>...</password>`` (Maven's settings.xml), ``<secret>{AQAAABAAAA...}</secret>``
    # (Jenkins' credentials.xml), ``<apiKey>...</apiKey>``: an element named after a credential.
    _any_case("secret_assignment", _XML_ELEMENT, _xml_element, anchors=("<",)),
    # A Docker config's ``"auth": "<base64 of user:password>"`` (``~/.docker/config.json``,
    # ``DOCKER_AUTH_CONFIG``), also with its quotes escaped inside a string.
    _Rule("basic_auth", _DOCKER_AUTH, _docker_auth, hints=("auth",)),
    _Rule("password_assignment", _TABLE_VALUE, _table_cell(passwords=True), anchors=("|",)),
    _Rule("secret_assignment", _TABLE_VALUE, _table_cell(passwords=False), anchors=("|",)),
)

# Credential words in the languages of `_PASSWORD_WORDS`: key, secret, token, password.
_SECRET_WORD = re.compile(
    r"(?<![A-Za-z])(?i:api[_-]?key|keys?|secrets?|tokens?|credentials?|passwor[dt]s?|passwd|kennwort|"
    r"chiave|chiavi|schl[üu]ssel|segreto|passphrase|cl[ée]s?|jetons?|secr[eè]te?|clave|llave|chaves?|"
    r"secreto|segredo|senha|contrase[ñn]a|sleutel|geheime?|wachtwoord|klucz|has[łl]o|nyckel|n[øo]gle|"
    r"avain|anahtar|kl[ií][čc]|ключ|токен|секрет|пароль|creds?|service:)(?![a-z])"
)
_SECRET_WORD_HINTS = (
    "key", "secret", "token", "credential", "passw", "kennwort", "chiav", "schl", "segret", "cl", "jeton",
    "secr", "llave", "chave", "segredo", "senha", "contrase", "sleutel", "geheim", "wachtwoord", "klucz",
    "has", "nyckel", "gle", "avain", "anahtar", "kl", "ключ", "токен", "секрет", "пароль", "cred", "service:",
)  # fmt: skip
_CANDIDATE = re.compile(r"[A-Za-z0-9+/_=-](?:[A-Za-z0-9+/_=~.-]{18,}[A-Za-z0-9+/_=-])")
_CONTEXT_BEFORE = 60
_CONTEXT_AFTER = 30
# Random-looking but public: digests and fingerprints (SHA256:..., sha384-... in SRI attributes),
# Stripe publishable keys, PostHog project keys (``phc_``, in every page's snippet), SendGrid's
# template ids (``d-`` and 32 hex), and base64 PEM blocks ("-----" is ``LS0tLS``): a private key
# among them is caught by its own rule, the rest are certificates and public keys.
_PUBLIC_PREFIX = re.compile(
    r"(?i:sha\d{1,3}|md5)-|pk_(?:live|test)_|phc_|LS0tLS|d-[0-9a-f]{32}(?![0-9A-Za-z])"
)
_DIGEST_BEFORE = re.compile(r"(?i:sha\d{0,3}|md5):$")
# Random-looking but public by what precedes it: SSH public keys, "public key" (``öffentlicher
# Schlüssel``, ``chiave pubblica``, ``clave pública``, ``publieke sleutel``), a CAPTCHA's site key
# (in every page that shows the CAPTCHA; its secret key is named so), a file's key (Figma's id of a
# file; `_NOT_CREDENTIAL_KEYS` has ``file`` too), fingerprints, digests.
_PUBLIC_BEFORE = re.compile(
    r"(?:ssh-(?:rsa|dss|ed25519)|ecdsa-sha2-nistp\d+|(?i:\bpublic|\böffentlich|\bpubblic|\bpúblic|\bpublieke?\b"
    r"|\bsite[ _-]?key\b|\bfile[ _-]?key\b|\bfingerprint|\bchecksum|\bdigest))"
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


# ``Key=value`` reads as one run of token characters; base64 has ``=`` only at its end, so a run
# with one inside is a name and a value, looked at apart.
_INNER_EQUALS = re.compile(r"=+(?=[^=])")


def _candidates(text: str) -> Iterator[re.Match[str]]:
    """The runs of `_CANDIDATE` in `text`, split where ``=`` stands inside one."""
    for match in _CANDIDATE.finditer(text):
        if _INNER_EQUALS.search(match.group()) is None:
            yield match
            continue
        start = match.start()
        for separator in _INNER_EQUALS.finditer(text, match.start(), match.end()):
            yield from _CANDIDATE.finditer(text, start, separator.start())
            start = separator.end()
        yield from _CANDIDATE.finditer(text, start, match.end())


_PREFIXED_ID = re.compile(rf"[a-z]{{2,10}}_[A-Za-z0-9]{{14,{MIN_IDENTIFIABLE_BODY - 1}}}")


def _generic_high_entropy(text: str) -> bool:
    """A random-looking string with a credential word shortly before or after it on the same line."""
    for match in _candidates(text):
        candidate = match.group().rstrip("=")
        # Mixed case, or lowercase with digits, or uppercase with digits (ULIDs stay out); dots and
        # tildes inside count as separators (Azure client secrets), not as sentence punctuation.
        joined = re.sub(r"[~.]", "", candidate) if "~" in candidate else candidate
        if "." in joined:
            continue
        random_looking = _looks_random(joined) or _looks_random_lowercase(joined) or _random_upper(joined)
        if not random_looking or _is_placeholder(candidate) or _is_public_or_id(text, match):
            continue
        # An object id with a short prefix (``req_<24>``, ``cus_<14>``): public, as in `_identifiable_token`.
        if _PREFIXED_ID.fullmatch(candidate):
            continue
        line_start = text.rfind("\n", 0, match.start()) + 1
        line_end = text.find("\n", match.end())
        line_end = len(text) if line_end < 0 else line_end
        before = text[max(line_start, match.start() - _CONTEXT_BEFORE) : match.start()]
        after = text[match.end() : min(line_end, match.end() + _CONTEXT_AFTER)]
        if _SECRET_WORD.search(before) or _SECRET_WORD.search(after):
            return True
    return False


# A memory that is nothing but one long random token: a key pasted on its own, with no name to go
# by. Hex (digests, SHAs), UUIDs, ULIDs, public prefixes (`_PUBLIC_PREFIX`), DER (``MII...``: public
# keys and certificates; a private key's DER is found by `_bare_pem_body`), bech32 addresses and
# keys (``bc1...``, ``age1...``, ``npub1...``) and IPFS CIDs are public or ids and pass; so do
# walks along the alphabet and runs of words.
MIN_BARE_KEY = 32
_BARE_VALUE = re.compile(rf"\s*[\"'`]?(?P<v>[A-Za-z0-9_+/=.~-]{{{MIN_BARE_KEY},2000}})[\"'`]?\s*")
_PUBLIC_BARE = re.compile(
    r"MII|[a-z]{1,6}1[02-9ac-hj-np-z]{38,}$|Qm[1-9A-HJ-NP-Za-km-z]{44}$|bafy[a-z2-7]{50,}$"
)


def _decodes_to_text(segment: str) -> bool:
    """Whether a base64 or base64url segment of 16+ characters decodes to printable ASCII."""
    if len(segment) < 16:
        return False
    try:
        decoded = base64.urlsafe_b64decode(
            segment.replace("+", "-").replace("/", "_") + "=" * (-len(segment) % 4)
        )
    except (binascii.Error, ValueError):
        return False
    return decoded.isascii() and decoded.decode("ascii").isprintable()


def _bare_key(value: str, min_length: int = MIN_BARE_KEY) -> bool:
    if (
        _UUID.fullmatch(value)
        or _ULID.fullmatch(value)
        or _PUBLIC_PREFIX.match(value)
        or _PUBLIC_BARE.match(value)
    ):
        return False
    if _is_placeholder(value) or _is_reference(value):
        return False
    # A made-up name's prefix (``foo_``, ``test_``), or a JWT's shape (a first segment that decodes to
    # JSON: a header alone is public, and whether a whole one is a token is the JWT rule's to say).
    prefix = _PREFIX_STUB.match(value)
    if prefix is not None and prefix.group()[:-1].lower() in _PUBLIC_TOKEN_PREFIXES:
        return False
    if value.startswith("eyJ") and _json_object(value.split(".", 1)[0]) is not None:
        return False
    # Three dotted segments are the shape of a JWT or a Discord bot token: their rules know the format.
    # Base64 of readable text (``NDgxMjEy...`` is a number) is judged by what it decodes to
    # (`_base64_hidden`), not as a random key.
    if value.count(".") == 2 or any(_decodes_to_text(part) for part in value.split(".")):
        return False
    joined = _TOKEN_SEPARATORS.sub("", value)
    if len(joined) < min_length or _HEX_ONLY.fullmatch(joined) or _sequential(joined):
        return False
    # Words run together (mixed case: ``ValueMapListCache...``); lowercase is judged by its vowels.
    if not joined.islower() and _wordy(joined):
        return False
    return _looks_random(joined) or _looks_random_lowercase(joined)


# A random token anywhere in a text, with no credential word beside it (``kraken '<random>'``, ``new
# Acme("<random>")``): `_bare_key`'s test on each run of 28+ token characters, minus what is public
# or an identifier by its shape or by the word before it. Not: a prefixed id (``cs_live_``,
# ``U_kgDO``, ``NODE_SEA_FUSE_<hex>``: the identifiable-token rule's to judge), ``0x`` and hex, hex
# with a letter or two before it (Gerrit's ``I<40 hex>``) or short words around it, a legacy Bitcoin
# address, a path (a segment that is a word, hex or a UUID), a file's base64 (a data URI, PNG, JPEG,
# GIF, PDF, zip, an SSH public key's ``AAAA``), the body of an armoured block that is not a private
# key (certificates, PGP signatures and public keys), a JWK's public members, and a token whose name
# says what it is (an id, a file or sheet, a hash, digest, nonce, salt, cursor, ETag, signature,
# ciphertext, wallet or address, a public key or pin; ``h1:`` of go.sum; or what an id names: a run,
# job, ticket, order, recording, release...). It runs last, after every other rule has passed every
# reading of the text.
MIN_RANDOM_TOKEN = 28
_NAMED_PREFIX = re.compile(r"(?:[a-z]{1,12}|[A-Z]{1,12})(?:[_-](?:[a-z]{1,12}|[A-Z]{1,12}))*[_-]")
_NOT_A_TOKEN = re.compile(r"0x[0-9A-Fa-f]+|[A-Za-z]{1,2}[0-9a-f]{24,}|[13][1-9A-HJ-NP-Za-km-z]{25,34}")
_ID_PARTS = re.compile(r"[-_]")
_PATH_SEGMENT = re.compile(r"[a-z]{3,}|[0-9a-fA-F]{7,}")
_FILE_BASE64 = ("iVBORw0KGgo", "/9j/", "R0lGOD", "JVBERi0", "UEsDB", "AAAA")
_ID_WORDS = (
    r"ids?|identifiers?|u?uids?|guids?|hash(?:es)?|digests?|checksums?|fingerprints?|etags?|nonces?|"
    r"salts?|ivs?|cursors?|commits?|revisions?|revs?|sha\d*|h1|cids?|address(?:es)?|addr|wallets?|"
    r"txs?|txids?|transactions?|files?|folders?|docs?|documents?|sheets?|spreadsheets?|videos?|"
    r"playlists?|images?|nodes?|objects?|blobs?|records?|messages?|msgs?|requests?|traces?|spans?|"
    r"correlations?|pages?|signatures?|sigs?|ciphertexts?|encrypted|content|pub(?:lic)?[_-]?keys?|"
    r"pins?|integrity|"
    # What an id names: a run, a job, a ticket, an order, a recording...
    r"replays?|recordings?|clips?|builds?|runs?|jobs?|tickets?|cases?|issues?|events?|tasks?|items?|"
    r"entit(?:y|ies)|resources?|assets?|attachments?|uploads?|media|posts?|comments?|threads?|channels?|"
    r"rooms?|conversations?|chats?|orders?|invoices?|receipts?|payments?|charges?|refunds?|customers?|"
    r"devices?|instances?|containers?|pods?|deployments?|releases?|snapshots?|backups?|volumes?|"
    r"workspaces?|projects?|tenants?|orgs?|organi[sz]ations?|boards?|cards?|rows?|tables?|models?|"
    r"datasets?|experiments?|checkpoints?|artifacts?|artefacts?|bundles?|packages?|branch(?:es)?|"
    r"changes?|patch(?:es)?|links?|slugs?"
)
_ID_BEFORE = re.compile(
    rf"(?:(?<![A-Za-z])|(?<=[a-z])(?=[A-Z]))(?i:{_ID_WORDS})\d*[\"'\]]?[ \t]*(?::=|=>|[:=])?[ \t]*[\"'`(\[]*$"
)
_JWK_PUBLIC_BEFORE = re.compile(r"\"(?:x|y|n|e|crv|kid|x5t|x5c)\"[ \t]*:[ \t]*\[?[ \t]*\"$")
_ARMOUR = "-----BEGIN "
_ID_CONTEXT = 40


def _named_or_shaped_as_id(text: str, match: re.Match[str], value: str) -> bool:
    """Whether a random-looking run is an identifier or public by its shape or the word before it."""
    if _NAMED_PREFIX.match(value) or _NOT_A_TOKEN.fullmatch(value) or value.startswith(_FILE_BASE64):
        return True
    # Hex with short words around it (``<32 hex>-us6``, ``<32 hex>-v2``): hex, which passes alone.
    if all(len(part) < 8 or _HEX_ONLY.fullmatch(part) for part in _ID_PARTS.split(value)):
        return True
    if "/" in value and any(
        _PATH_SEGMENT.fullmatch(part) or _UUID.fullmatch(part) for part in value.split("/")
    ):
        return True
    start = match.start()
    # After ``%``: inside a percent-encoded stretch (a data URI in a URL, ``base64%2CiVBOR...``),
    # which the escapes' reading decodes for the rules that name a credential.
    if start and text[start - 1] == "%":
        return True
    line_start = text.rfind("\n", 0, start) + 1
    before = text[max(line_start, start - _ID_CONTEXT) : start]
    if before.endswith("base64,") or _ID_BEFORE.search(before) or _JWK_PUBLIC_BEFORE.search(before):
        return True
    # A credential word within the generic rule's reach: that rule (and the named ones) judged this
    # token with its name, and passed it (``recaptcha_site_key = 6Lc...``, ``cache key``).
    line_end = text.find("\n", match.end())
    line_end = len(text) if line_end < 0 else line_end
    if _SECRET_WORD.search(text, max(line_start, start - _CONTEXT_BEFORE), start) or _SECRET_WORD.search(
        text, match.end(), min(line_end, match.end() + _CONTEXT_AFTER)
    ):
        return True
    armour = text.rfind(_ARMOUR, 0, start)
    return armour >= 0 and "PRIVATE" not in text[armour : armour + 60].split("\n", 1)[0]


def _random_token(text: str) -> bool:
    """A run of 28+ token characters that `_bare_key` calls random and nothing marks as public."""
    for match in _candidates(text):
        value = match.group().rstrip("=")
        if (
            len(value) < MIN_RANDOM_TOKEN
            or "." in value
            or _PREFIXED_ID.fullmatch(value)
            or _named_or_shaped_as_id(text, match, value)
            or _is_public_or_id(text, match)
        ):
            continue
        if _bare_key(value, MIN_RANDOM_TOKEN):
            return True
    return False


def _lower_same_length(text: str) -> str:
    """`text` in lowercase, character for character, so that positions in both agree."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    # A few characters lowercase to two (U+0130 "İ" -> "i̇"); keep those as they are.
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


def _anchor_positions(lowered: str, anchors: tuple[str, ...]) -> list[int]:
    """Where in `lowered` any of `anchors` starts, in order."""
    positions: set[int] = set()
    for anchor in anchors:
        at = lowered.find(anchor)
        while at >= 0:
            positions.add(at)
            at = lowered.find(anchor, at + 1)
    return sorted(positions)


# Runs of characters that tokens are made of, and the characters that start a new part inside one
# (``TOKEN=glpat-...``, ``cookie=_gitlab_session=...``).
_TOKEN_RUN = re.compile(r"(?<![A-Za-z0-9_.~+/=-])[A-Za-z0-9_.~+/=-]{20,}")
_RUN_PART = re.compile(r"[.~+/=]")


class _TokenRuns:
    """The runs of `_TOKEN_RUN` in a text, and where each run or part of one starts; found once per
    text, when the first ``in_tokens`` rule needs them."""

    def __init__(self, text: str) -> None:
        self.spans = [run.span() for run in _TOKEN_RUN.finditer(text)]
        self.starts = [
            at
            for start, end in self.spans
            for at in (start, *(part.end() for part in _RUN_PART.finditer(text, start, end)))
        ]


def _token_matches(rule: _Rule, text: str, lowered: str, runs: _TokenRuns) -> Iterator[re.Match[str]]:
    """The matches of an ``in_tokens`` rule: searched inside each run, or tried at its anchors."""
    if not rule.anchors:
        for start, end in runs.spans:
            yield from rule.pattern.finditer(text, start, end)
        return
    for at in runs.starts:
        if lowered.startswith(rule.anchors, at) and (found := rule.pattern.match(text, at)) is not None:
            yield found


def _matches(rule: _Rule, subject: str, positions: list[int]) -> Iterator[re.Match[str]]:
    if not rule.anchors:
        yield from rule.pattern.finditer(subject)
        return
    for at in positions:
        if (found := rule.pattern.match(subject, at)) is not None:
            yield found


# Keys that vendors publish in their documentation as examples, and the words that mark a text as
# talking about an example. A text holding one of these keys AND one of those words (outside the
# key) is read with the keys taken out, so notes about documentation pass while a real key beside
# them is still found; the bare key, or a config line with no such word, is refused as before.
_DOCUMENTED_EXAMPLES = (
    "AKIAIOSFODNN7EXAMPLE",
    "AKIAI44QH8DHBEXAMPLE",
    *_AWS_DOCUMENTATION_SECRETS,
    "sk_test_4eC39HqLyjWDarjtT1zdp7dc",
    "pk_test_TYooMQauvdEDq54NiTphI7jx",
)
_EXAMPLE_WORD = re.compile(
    r"\b(?:examples?|samples?|documentation|docs|documented|placeholders?|tutorials?|"
    r"beispiel\w*|exemples?|ejemplos?|esempi[oa]?)\b",
    re.IGNORECASE,
)
_DOCUMENTED_EXAMPLE = re.compile("|".join(map(re.escape, _DOCUMENTED_EXAMPLES)))


def _without_documented_examples(text: str) -> str:
    """`text` with the vendors' documented example keys taken out, when it names them as examples."""
    if _DOCUMENTED_EXAMPLE.search(text) is None:
        return text
    rest = _DOCUMENTED_EXAMPLE.sub(" ", text)
    return rest if _EXAMPLE_WORD.search(rest) else text


def find_secret(text: str) -> SecretMatch | None:
    """Return the first credential found in `text` (rules in the module docstring), or None."""
    text = _without_documented_examples(text)
    first: str | None = None
    for variant in _variants(text):
        if (found := _find(variant, decode=True)) is not None:
            return found
        first = variant if first is None else first
    # Last, after every other rule on every reading: a random token with no name to go by, so that
    # what another rule names (a PEM body, a continued ``curl -u``) is refused as that. It reads the
    # text as normalised only: the other readings are stretches cut from it, whose edges cut tokens.
    if first is not None and _random_token(first):
        return SecretMatch("random_token", _LABELS["random_token"])
    return None


def _find(text: str, *, decode: bool) -> SecretMatch | None:
    """The rules on normalised `text`; with `decode`, also on what base64 in it decodes to."""
    lowered = _lower_same_length(text)
    positions: dict[tuple[str, ...], list[int]] = {}
    runs: _TokenRuns | None = None
    for rule in _RULES:
        if rule.hints and not any(hint in lowered for hint in rule.hints):
            continue
        if rule.in_tokens:
            if runs is None:
                runs = _TokenRuns(text)
            found_in: Iterator[re.Match[str]] = _token_matches(rule, text, lowered, runs)
        else:
            if rule.anchors and rule.anchors not in positions:
                positions[rule.anchors] = _anchor_positions(lowered, rule.anchors)
            found_in = _matches(rule, lowered if rule.exact else text, positions.get(rule.anchors, []))
        for found in found_in:
            start = found.start()
            if start and text[start - 1] in rule.not_after:
                continue
            match = rule.exact.match(text, start) if rule.exact else found
            if match is not None and rule.check(match):
                return SecretMatch(rule.kind, _LABELS[rule.kind])
    if any(hint in lowered for hint in _SECRET_WORD_HINTS) and _generic_high_entropy(text):
        return SecretMatch("generic_high_entropy", _LABELS["generic_high_entropy"])
    if (bare := _BARE_VALUE.fullmatch(text)) is not None and _bare_key(bare.group("v")):
        return SecretMatch("bare_key", _LABELS["bare_key"])
    return _base64_hidden(text) if decode else None


def find_secret_in_fields(**fields: str | None) -> tuple[str, SecretMatch] | None:
    """The first field (in the order given) whose value holds a credential, with what was found."""
    for name, value in fields.items():
        if value and (match := find_secret(value)) is not None:
            return name, match
    return None
