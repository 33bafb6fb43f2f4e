"""Dev corpus, part three: credentials written to slip past a scanner, and what must still pass.

Families (one per way of hiding; the rules are tuned on these, like the rest of the dev corpus):
look-alike letters from other scripts and blank characters inside a token; encodings (a PEM body
without its BEGIN/END lines, base64 of a token or of ``id:secret``, a JWT with spaces around its
dots); "the password is X" in more languages and with the value before the word; password flags
of more tools; webhook URLs with the secret in the path; bare tokens after short words and after a
service's name; passwords holding ``<``, ``>``, ``$(`` or the word "Secret".

Every secret is built from seeded random characters at run time, as in `bench.secret_corpus`.
"""

from __future__ import annotations

import base64
import random
import string
from collections.abc import Callable

_B62 = string.ascii_letters + string.digits
_B64URL = _B62 + "-_"
_HEX = "0123456789abcdef"
_LOWER_DIGITS = string.ascii_lowercase + string.digits
_SYMBOLS = "!#%&*+=?@^_"

_Maker = Callable[[random.Random], str]
_Family = tuple[str, _Maker, tuple[str, ...]]


def _chars(rng: random.Random, n: int, alphabet: str) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _password(rng: random.Random, extra: str = "") -> str:
    """A password people type: letters of both cases, two digits, a symbol, and `extra` inside."""
    body = [rng.choice(string.ascii_lowercase), rng.choice(string.ascii_uppercase)]
    body += [rng.choice(string.digits), rng.choice(string.digits), rng.choice(_SYMBOLS)]
    body += [rng.choice(_B62) for _ in range(rng.randint(4, 7))]
    rng.shuffle(body)
    at = rng.randint(1, len(body))
    return rng.choice(string.ascii_letters) + "".join(body[:at]) + extra + "".join(body[at:])


# Letters that Unicode's confusables data lists as look-alikes of Latin ones, from scripts and
# blocks the older table did not cover: IPA, Armenian, Cherokee, Latin small capitals, Coptic.
_FAR_LOOK_ALIKES = {
    "g": "\u0261",  # LATIN SMALL LETTER SCRIPT G
    "h": "\u04bb",  # CYRILLIC SMALL LETTER SHHA
    "o": "\u0585",  # ARMENIAN SMALL LETTER OH
    "u": "\u057d",  # ARMENIAN SMALL LETTER SEH
    "n": "\u0578",  # ARMENIAN SMALL LETTER VO
    "q": "\u0566",  # ARMENIAN SMALL LETTER ZA
    "A": "\u13aa",  # CHEROKEE LETTER GO
    "T": "\u13a2",  # CHEROKEE LETTER I
    "S": "\u13da",  # CHEROKEE LETTER DU
    "v": "\u1d20",  # LATIN LETTER SMALL CAPITAL V
    "w": "\u1d21",  # LATIN LETTER SMALL CAPITAL W
    "l": "\u2c92",  # COPTIC CAPITAL LETTER IAUDA
    "x": "\u2a2f",  # VECTOR OR CROSS PRODUCT
}


def _far_look_alike(value: str) -> str:
    return "".join(_FAR_LOOK_ALIKES.get(c, c) for c in value)


def _blank_inside(rng: random.Random, value: str) -> str:
    """`value` with a braille blank or an ideographic space somewhere in its middle."""
    at = rng.randint(4, len(value) - 4)
    return value[:at] + rng.choice(["\u2800", "\u3000", "\u2800\u2800"]) + value[at:]


def _der_private_key(rng: random.Random) -> str:
    """The base64 body of a PEM private key, without its BEGIN/END lines (PKCS#1, PKCS#8 or SEC 1)."""
    shape = rng.choice(["pkcs1", "pkcs8", "ec"])
    if shape == "pkcs1":
        inner = b"\x02\x01\x00\x02\x82\x01\x01\x00" + rng.randbytes(600)
    elif shape == "pkcs8":
        inner = b"\x02\x01\x000\r\x06\t*\x86H\x86\xf7\r\x01\x01\x01\x05\x00\x04\x82\x02\x5e" + rng.randbytes(
            600
        )
    else:
        inner = b"\x02\x01\x01\x04 " + rng.randbytes(32) + rng.randbytes(80)
    der = b"\x30\x82" + len(inner).to_bytes(2, "big") + inner
    text = base64.b64encode(der).decode()
    return "\n".join(text[i : i + 64] for i in range(0, len(text), 64))


def _openssh_body(rng: random.Random) -> str:
    data = b"openssh-key-v1\x00" + rng.randbytes(300)
    text = base64.b64encode(data).decode()
    return "\n".join(text[i : i + 70] for i in range(0, len(text), 70))


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _spaced_jwt(rng: random.Random) -> str:
    header = _b64(f'{{"alg":"{rng.choice(["HS256", "RS256"])}","typ":"JWT"}}').rstrip("=")
    payload = _b64(f'{{"sub":"{rng.randint(1000, 9999)}","exp":{rng.randint(1_700_000_000, 1_800_000_000)}}}')
    sep = rng.choice([" . ", " .", ". ", "\n.\n"])
    return f"{header}{sep}{payload.rstrip('=')}{sep}{_chars(rng, 43, _B64URL)}"


POSITIVES: tuple[_Family, ...] = (
    # Look-alikes from beyond Cyrillic and Greek, and blanks inside a token.
    (
        "github_token",
        lambda r: _far_look_alike("ghp_" + _chars(r, 36, _B62)),
        ("Release bot token: {s}", "export GITHUB_TOKEN={s}"),
    ),
    (
        "openai_api_key",
        lambda r: _blank_inside(r, "sk-proj-" + _chars(r, 60, _B64URL)),
        ("OpenAI key for the eval: {s}", "Der OpenAI-Schlüssel lautet {s}"),
    ),
    (
        "aws_access_key",
        lambda r: _blank_inside(r, "AKIA" + _chars(r, 16, string.ascii_uppercase + "234567")),
        ("backup user access key id {s}", "AWS id {s} for the exporter"),
    ),
    # Encodings.
    (
        "private_key",
        _der_private_key,
        (
            "Signing key body (headers stripped for the CI variable):\n{s}",
            "{s}",
            "Hier der Schlüssel ohne Kopfzeilen:\n{s}",
        ),
    ),
    ("private_key", _openssh_body, ("deploy key, body only:\n{s}",)),
    (
        "github_token",
        lambda r: _b64("ghp_" + _chars(r, 36, _B62)),
        ("CI variable, base64: {s}", "Stored base64-encoded in the vault export: {s}"),
    ),
    (
        "basic_auth",
        lambda r: _b64(f"{_chars(r, 20, _LOWER_DIGITS)}:{_chars(r, 40, _B62)}"),
        ("client credentials, base64 as the API wants them: {s}", "creds={s}", "Encoded id and secret {s}"),
    ),
    (
        "basic_auth",
        lambda r: _b64(f"deploy:{_password(r)}"),
        ("registry auth for ~/.docker/config.json: {s}", '"auth": "{s}"'),
    ),
    ("jwt", _spaced_jwt, ("Session token {s}", "jwt = {s}")),
    # "The password is X" in more languages; the value before the word.
    (
        "password_assignment",
        _password,
        (
            "サーバーのパスワードは{s}です",
            "パスワード：{s}",
            "数据库密码是{s}",
            "WiFi 密码: {s}",
            "관리자 비밀번호는 {s} 입니다",
            "Ο κωδικός πρόσβασης είναι {s}",
            "A jelszó: {s}",
            "a jelszó {s} lett",
            "Parola este {s}",
            "Parola pentru router: {s}",
            "Kata sandinya adalah {s}",
            "kata sandi wifi: {s}",
            "Mật khẩu là {s}",
            "Nimm {s} als Passwort",
            "Prends {s} comme mot de passe",
            "Usa {s} como contraseña",
            "Usa {s} come password",
            "use {s} as the password for the admin user",
            "Take {s} as password.",
            "{s} is the new password for the NAS",
            "{s} ist das neue Passwort",
        ),
    ),
    # Passwords that hold characters or words once taken for placeholders.
    (
        "password_assignment",
        lambda r: _password(r, r.choice(["<", ">", "$(", "Secret", "<>"])),
        ("password={s}", "DB_PASSWORD='{s}'", "The password is {s}", "Passwort: {s}"),
    ),
    # Command lines.
    (
        "cli_password",
        _password,
        (
            "SSHPASS={s} sshpass -e ssh admin@10.0.4.12",
            "export SSHPASS='{s}' && sshpass -e rsync -a ./dist host:/srv",
            r"net use Z: \\fileserver\finance {s} /user:ACME\jdoe",
            r"net use \\nas01\backup /user:backup {s}",
            "htpasswd -b /etc/nginx/.htpasswd admin {s}",
            "htpasswd -bc .htpasswd deploy {s}",
            "xfreerdp /v:10.1.2.3 /u:admin /p:{s}",
            "psexec \\\\srv01 -u admin -p {s} cmd",
            "sqlplus scott/{s}@orcl",
            "echo 'deploy:{s}' | chpasswd",
            "wmic /node:srv02 /user:admin /password:{s} os get caption",
        ),
    ),
    # Webhook URLs with the secret in the path.
    (
        "webhook_url",
        lambda r: f"https://chat.acme.io/hooks/{_chars(r, 26, _LOWER_DIGITS)}",
        ("Mattermost incoming webhook: {s}", "Alerts are posted to {s}"),
    ),
    (
        "webhook_url",
        lambda r: (
            f"https://hooks.zapier.com/hooks/catch/{r.randint(100000, 9999999)}/{_chars(r, 6, _LOWER_DIGITS)}/"
        ),
        ("Zap trigger for new leads: {s}",),
    ),
    (
        "webhook_url",
        lambda r: f"https://maker.ifttt.com/trigger/door_open/with/key/{_chars(r, 22, _B64URL)}",
        ("IFTTT hook for the door sensor {s}",),
    ),
    (
        "webhook_url",
        lambda r: (
            f"https://chat.googleapis.com/v1/spaces/AAAA{_chars(r, 7, _B62)}/messages?"
            f"key={_chars(r, 39, _B64URL)}&token={_chars(r, 43, _B64URL)}"
        ),
        ("Google Chat webhook for #ops: {s}",),
    ),
    (
        "webhook_url",
        lambda r: f"https://rocket.acme.io/hooks/{_chars(r, 17, _B62)}/{_chars(r, 48, _B62)}",
        ("Rocket.Chat integration URL {s}",),
    ),
    # Bare tokens after short words, and after a service's name.
    (
        "vendor_api_key",
        lambda r: _chars(r, r.choice([32, 40]), _HEX),
        (
            "Datadog API key {s}",
            "DD_API_KEY {s}",
            "New Relic license key: {s}",
            "pagerduty integration key {s}",
            "Mailgun {s}",
            "Sentry DSN key {s}",
        ),
    ),
    (
        "generic_high_entropy",
        lambda r: _chars(r, 32, string.ascii_uppercase + string.digits),
        ("creds {s}", "service: {s}", "key {s}", "token {s}"),
    ),
    (
        "azure_client_secret",
        lambda r: _chars(r, 3, _B62) + r.choice("78") + "Q~" + _chars(r, 34, _B62 + "~._-"),
        (
            "The app registration's client secret is {s} (expires in June).",
            "Azure AD secret for the exporter {s}",
            "Client secret value: {s}",
        ),
    ),
    (
        "azure_client_secret",
        lambda r: _chars(r, 34, _B62 + "~.-_"),
        ("The Azure client secret of the reporting app is {s}.",),
    ),
)


NEGATIVES: tuple[str, ...] = (
    "パスワードは12文字以上にしてください。",
    "パスワードを忘れた場合は管理者に連絡してください。",
    "密码必须至少包含一个数字。",
    "请不要把密码写在工单里。",
    "비밀번호는 90일마다 바꿔야 합니다.",
    "Ο κωδικός πρόσβασης πρέπει να έχει τουλάχιστον 12 χαρακτήρες.",
    "A jelszót háromhavonta cserélni kell.",
    "Parola trebuie schimbată la fiecare trei luni.",
    "Kata sandi harus diganti setiap 90 hari.",
    "Mật khẩu phải có ít nhất mười hai ký tự.",
    "Nimm den Passwortmanager statt eines Zettels.",
    "Use the vault entry as the password source, never a literal.",
    "Use <your-password> as the password in the example config.",
    "password=<your-password>",
    "DB_PASSWORD=${DB_PASSWORD}",
    'password="$(cat /run/secrets/db_password)"',
    "The password is stored in ${VAULT_PATH}/db.",
    "sshpass -e reads the password from the SSHPASS environment variable.",
    'SSHPASS="$SSH_PASSWORD" sshpass -e ssh admin@host',
    r"net use Z: \\fileserver\finance /user:ACME\jdoe",
    r"net use Z: \\fileserver\finance * /user:ACME\jdoe prompts for the password.",
    "htpasswd -c /etc/nginx/.htpasswd admin asks for the password twice.",
    "htpasswd -B file user creates a bcrypt entry after a prompt.",
    "Mattermost webhooks look like https://your-mattermost/hooks/<id>; ask #ops for ours.",
    "The webhook docs: https://hooks.zapier.com/hooks/catch/<account>/<hook>/",
    "Docs at https://docs.mattermost.com/developer/webhooks-incoming.html explain the format.",
    "Datadog dashboards for the API are linked from the runbook.",
    "The Datadog API key lives in Vault under kv/observability.",
    "Trace 4bf92f3577b34da6a3ce929d0e0e4736 shows the slow token exchange.",
    "ULID 01ARZ3NDEKTSV4RRFFQ69G5FAV is the order id, not a token.",
    "Run key 01HV6ZJ8Q5X3K2M4N7P9R0S1T2 of the nightly import finished.",
    "Commit 3f786850e387550fdab836ed7e6dc881de23001b fixed the key rotation.",
    "md5 of the export: d41d8cd98f00b204e9800998ecf8427e",
    "Image digest sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "Request id 6f1c8a2e-4b7d-4e2a-9c3f-0a1b2c3d4e5f failed with invalid_token.",
    "The cert body starts with MIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJRTES",
    "Base64 of 'hello world' is aGVsbG8gd29ybGQ=, handy for the test.",
    "Authorization: Basic dXNlcjpwYXNzd29yZA== is the example from the RFC.",
    "The JWT header . payload . signature layout is explained in RFC 7519.",
    "Tokens are split as header . payload . signature, each base64url.",
    "Passwords with < or > must be quoted in the shell.",
    "Secret Santa draw is on Friday; the password for the gift list is on the fridge.",
    "Azure client secrets expire after 24 months; renew them in the portal.",
    "Service: billing-api, owner: Priya, on-call: #payments.",
    "key: value pairs are parsed by the YAML loader.",
    "token: the JWT from the login response.",
    "Creds are in 1Password, vault 'Platform'.",
)
