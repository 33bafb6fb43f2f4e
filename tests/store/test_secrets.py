"""Credential detection: the corpus (recall, false positives) and the edge cases the rules promise."""

from __future__ import annotations

import base64
import json
import random
import string
import sys
import unicodedata
from collections.abc import Callable
from dataclasses import FrozenInstanceError

import pytest

from bench.secret_corpus import (
    acceptable_kinds,
    held_out_negative_samples,
    held_out_positive_samples,
    negative_samples,
    positive_samples,
)
from memory_mcp.store.keys import generate_key
from memory_mcp.store.secrets import SECRET_KINDS, SecretMatch, find_secret, find_secret_in_fields

_B62 = string.ascii_letters + string.digits
_HEX = "0123456789abcdef"

POSITIVES = positive_samples()
NEGATIVES = negative_samples()


def _random(n: int, alphabet: str = _B62, seed: int = 11) -> str:
    """Fresh random characters: the tests hold no literal that looks like a real key."""
    rng = random.Random(seed * 1000 + n)
    return "".join(rng.choice(alphabet) for _ in range(n))


def test_corpus_size_and_variety() -> None:
    assert len(POSITIVES) >= 250
    assert len({kind for _, kind in POSITIVES}) >= 30
    assert len(NEGATIVES) >= 400
    assert sum(1 for text in NEGATIVES if not text.isascii()) >= 100


def test_held_out_corpus_is_separate_from_the_dev_corpus() -> None:
    held_out = held_out_positive_samples()
    held_out_negatives = held_out_negative_samples()
    assert len(held_out) >= 60 and len(held_out_negatives) >= 100
    assert {text for text, _ in held_out}.isdisjoint(text for text, _ in POSITIVES)
    assert set(held_out_negatives).isdisjoint(NEGATIVES)
    assert {kind for _, kind in held_out} <= {k.kind for k in SECRET_KINDS}
    assert held_out_positive_samples() == held_out


def test_corpus_is_deterministic() -> None:
    assert positive_samples() == POSITIVES
    assert negative_samples() == NEGATIVES
    assert positive_samples(seed=2) != POSITIVES


def test_every_expected_kind_is_declared() -> None:
    declared = {k.kind for k in SECRET_KINDS}
    assert {kind for _, kind in POSITIVES} <= declared
    assert len(declared) == len(SECRET_KINDS)


@pytest.mark.parametrize(("text", "kind"), POSITIVES, ids=[f"{k}-{i}" for i, (_, k) in enumerate(POSITIVES)])
def test_positive_detected_with_its_kind(text: str, kind: str) -> None:
    match = find_secret(text)
    assert match is not None, text
    assert match.kind in acceptable_kinds(kind), (match.kind, text)


def test_recall_and_false_positive_rate() -> None:
    hits = sum(1 for text, _ in POSITIVES if find_secret(text) is not None)
    false_positives = [text for text in NEGATIVES if find_secret(text) is not None]
    assert hits / len(POSITIVES) >= 0.98
    assert len(false_positives) / len(NEGATIVES) <= 0.01, false_positives


def test_recall_holds_for_other_seeds() -> None:
    """The corpus seed is not tuned: other draws of the same shapes are found as well."""
    samples = [s for seed in range(1, 6) for s in positive_samples(seed)]
    hits = sum(1 for text, kind in samples if (m := find_secret(text)) and m.kind in acceptable_kinds(kind))
    negatives = [n for seed in range(1, 6) for n in negative_samples(seed)]
    false_positives = [n for n in negatives if find_secret(n) is not None]
    assert hits / len(samples) >= 0.98
    assert len(false_positives) / len(negatives) <= 0.01, false_positives[:5]


def test_match_carries_kind_and_label() -> None:
    match = find_secret(f"export GITHUB_TOKEN=ghp_{_random(36)}")
    assert match == SecretMatch("github_token", "a GitHub token")
    with pytest.raises(FrozenInstanceError):
        setattr(match, "kind", "other")  # noqa: B010 - the point is to try a write mypy would reject


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "password=<your password>",
        "password: <password>",
        "token=${API_TOKEN}",
        "api_key: {{ secrets.api_key }}",
        "password=***",
        "password: ********",
        "secret=xxxxxxxxxxxx",
        "password=changeme",
        'password = "..."',
        "client_secret=REDACTED",
        "password=example123",
        "token=YOUR_TOKEN_HERE",
        "DB_PASSWORD=$DB_PASSWORD",
        "password=os.environ['DB_PASSWORD']",
        "secret_key = settings.SECRET_KEY",
        "postgres://user:password@localhost:5432/app",
        "postgres://postgres:postgres@localhost:5432/dev",
        "amqp://guest:guest@localhost:5672/",
        "postgres://app:${PGPASSWORD}@db:5432/app",
        "Authorization: Bearer <token>",
        "Authorization: Bearer $TOKEN",
        "AKIAXXXXXXXXXXXXXXXX",
        f"ghp_{'x' * 36}",
        "export MEMORY_MCP_KEY=<your key>",
        "MEMORY_MCP_KEY=$(cat ~/.config/memory-mcp/key)",
        "mmk_0123456789_...",
    ],
)
def test_placeholders_are_not_secrets(text: str) -> None:
    assert find_secret(text) is None


@pytest.mark.parametrize(
    "text",
    [
        "Rotate the API key every 90 days.",
        "The password policy requires 12 characters.",
        "Tokens expire after an hour.",
        "Use `password=<your password>` in the config.",
        "Token: expires after 60 minutes.",
        "The password is stored hashed, never in plain text.",
        "token: OAuth2-compatible scopes",
        "max_tokens=4096",
        "password_min_length=12",
        "Das Passwort muss mindestens zwölf Zeichen lang sein.",
        "La password è scaduta.",
        "def verify(token: str) -> Claims:",
        "token = jwt.encode(payload, key, algorithm='HS256')",
    ],
)
def test_prose_about_credentials_is_not_a_secret(text: str) -> None:
    assert find_secret(text) is None


def test_bare_git_sha_is_not_a_secret_but_an_assigned_one_is() -> None:
    sha = _random(40, _HEX)
    assert find_secret(f"The key fix is {sha}, deployed on Monday.") is None
    assert find_secret(f"token={sha}") == SecretMatch("secret_assignment", "a secret, token or API key value")


def test_uuid_and_codes_near_key_words_are_not_secrets() -> None:
    text = (
        "Ticket PROJ-1234: the API key rotation for request 550e8400-e29b-41d4-a716-446655440000 "
        "failed with E_CONN_RESET on v2.14.3-rc.1; colour #1a2b3c."
    )
    assert find_secret(text) is None


def test_random_string_needs_a_credential_word_nearby() -> None:
    value = _random(32)
    assert find_secret(f"Request id {value} took 80 ms.") is None
    assert find_secret(f"The signing key is {value}.") is not None


def test_identifier_near_key_word_is_not_random() -> None:
    assert find_secret("the token comes from getUserTokenV2Handler and AWSSecretKeyRotationV2Job") is None


def test_jwt_needs_a_json_header_with_alg() -> None:
    payload = base64.urlsafe_b64encode(b'{"sub":"user-1","exp":1700000000}').rstrip(b"=").decode()
    signature = _random(43)
    good = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=").decode()
    no_alg = base64.urlsafe_b64encode(b'{"typ":"JWT","kid":"k1"}').rstrip(b"=").decode()
    assert find_secret(f"{good}.{payload}.{signature}") == SecretMatch("jwt", "a JSON Web Token")
    assert find_secret(f"{no_alg}.{payload}.{signature}") is None


def test_pem_header_alone_is_prose_but_a_block_is_a_key() -> None:
    assert find_secret("Paste the -----BEGIN PRIVATE KEY----- block into the secret, not here.") is None
    body = base64.b64encode(random.Random(3).randbytes(48)).decode()
    block = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"
    assert find_secret(block) == SecretMatch("private_key", "a private key")


def test_secret_found_at_the_end_of_a_long_text() -> None:
    prose = "The team agreed to rotate keys quarterly and to keep tokens short-lived. " * 1500
    assert find_secret(prose) is None
    assert find_secret(prose + f"npm_{_random(36)}") == SecretMatch("npm_token", "an npm access token")


def test_unicode_text() -> None:
    assert (
        find_secret("Schlüssel für das Büro: im Safe 🗝️, la chiave è al piano terra — 日本語も大丈夫") is None
    )
    match = find_secret(f"Das Passwort für den Router lautet Gr{_random(6)}ün9!")
    assert match is not None and match.kind == "password_assignment"


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (f"The Wi-Fi password for the guest network is K{_random(10)}7#.", "password_assignment"),
        (f'{{"password": "x{_random(12)}9"}}', "password_assignment"),
        (f"la password del NAS è Q{_random(9)}4!", "password_assignment"),
        (f"redis://:{_random(16)}@cache.internal:6379/0", "connection_string_password"),
        (f"curl -u deploy:{_random(14)}9 https://artifacts.internal/upload", "basic_auth"),
        (f"SK{_random(32, _HEX)}", "twilio_key"),
        (f"sk-ant-api03-{_random(90)}", "anthropic_api_key"),
        (f"sk-{_random(48)}", "openai_api_key"),
        (f"the workspace token is glwt-{_random(20)}", "gitlab_token"),
    ],
)
def test_targeted_positives(text: str, kind: str) -> None:
    match = find_secret(text)
    assert match is not None and match.kind == kind, (match, text)


# ---------------------------------------------------------------------------------------------
# Version 2: normalisation, the project's keys, languages, command lines, webhooks, cloud OAuth
# ---------------------------------------------------------------------------------------------

_PASSWORD_SYMBOLS = "!#%&*+=?@^_"


def _password(seed: int = 5) -> str:
    """A fresh password with lower, upper, digits and a symbol."""
    rng = random.Random(seed)
    core = _random(9, seed=seed) + rng.choice(string.digits) + rng.choice(_PASSWORD_SYMBOLS)
    return "K" + core + "7"


def _zero_width(value: str, char: str = "\u200b") -> str:
    return char.join(value)


def test_the_projects_own_keys_are_refused_in_prose_and_in_exports() -> None:
    key = generate_key().plaintext
    expected = SecretMatch("memory_mcp_key", "a Memory-MCP API key")
    assert find_secret(f"My Memory-MCP key is {key}, keep it for later.") == expected
    assert find_secret(f"export MEMORY_MCP_KEY={key}") == expected
    assert find_secret(f'{{"headers": {{"X-Api-Key": "{key}"}}}}') == expected


@pytest.mark.parametrize(
    "invisible",
    ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u202e", "\U000e0041", "\u0301"],
)
def test_invisible_characters_inside_a_token_are_ignored(invisible: str) -> None:
    token = f"ghp_{_random(36)}"
    assert find_secret(f"CI token: {_zero_width(token, invisible)}") == SecretMatch(
        "github_token", "a GitHub token"
    )


def test_every_format_character_is_removed_before_matching() -> None:
    """Category Cf as the running Python knows it: none of them can split a key."""
    token = f"AKIA{_random(16, string.ascii_uppercase + string.digits)}"
    format_chars = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    assert len(format_chars) > 150
    missed = [hex(ord(c)) for c in format_chars if find_secret(token[:8] + c + token[8:]) is None]
    assert missed == []


def test_look_alike_letters_are_folded_inside_latin_words() -> None:
    token = "ghp_" + _random(36)
    # Cyrillic о, е, а and Greek ο for their Latin twins; "раssword" starts with Cyrillic р and а.
    cyrillic = token.replace("o", "\u043e").replace("e", "\u0435").replace("a", "\u0430")
    assert cyrillic != token
    assert find_secret(f"token {cyrillic}") == SecretMatch("github_token", "a GitHub token")
    assert find_secret("\u0440\u0430ssword=" + _password()) is not None
    aws = "\u0410\u041a\u0406\u0410" + _random(16, string.ascii_uppercase + string.digits)
    assert find_secret(f"key id {aws}") == SecretMatch("aws_access_key", "an AWS access key ID")


def test_compatibility_forms_fold_to_ascii() -> None:
    token = "npm_" + _random(36)
    fullwidth = "".join(chr(ord(c) + 0xFEE0) for c in token)
    bold = "".join(chr(0x1D41A + ord(c) - ord("a")) if c.islower() else c for c in token)
    assert find_secret(fullwidth) == SecretMatch("npm_token", "an npm access token")
    assert find_secret(bold) == SecretMatch("npm_token", "an npm access token")


def test_normalisation_leaves_other_scripts_alone() -> None:
    """Russian and Greek words are not folded, so their own credential words still count."""
    assert find_secret("Пароль нужно менять каждые три месяца.") is None
    assert find_secret("Ο κωδικός αλλάζει κάθε τρεις μήνες.") is None
    assert find_secret(f"пароль: {_password()}") is not None


@pytest.mark.parametrize(
    "template",
    [
        "The password for the VPN is {p}",
        "Das Passwort lautet {p}",
        "Kennwort: {p}",
        "Le mot de passe du routeur est {p}",
        "mot de passe : {p}",
        "La contraseña del servidor es {p}",
        "contraseña: {p}",
        "A senha do banco é {p}",
        "palavra-passe: {p}",
        "Het wachtwoord is {p}",
        "La password del NAS è {p}",
        "parola d'ordine: {p}",
        "Hasło do routera: {p}",
        "Lösenordet är {p}",
        "Passordet er {p}",
        "Salasana on {p}",
        "Şifre: {p}",
        "Heslo je {p}",
        "Пароль от сервера: {p}",
        "pw: {p}",
        "PASS={p}",
        "SMTP_PASS={p}",
        "root pw {p}",
        "Login for the old CMS: admin / {p}",
    ],
)
def test_password_phrases_in_many_languages(template: str) -> None:
    match = find_secret(template.format(p=_password()))
    assert match is not None and match.kind == "password_assignment", (match, template)


@pytest.mark.parametrize(
    "command",
    [
        "sshpass -p {p} ssh pi@10.0.7.12",
        "sshpass -p'{p}' rsync -a dist/ web1:/srv",
        "mysql -u root -p{p} shop",
        "mysqldump -uadmin -p'{p}' --all-databases",
        "docker login -u ci -p {p} registry.acme.io",
        "redis-cli -h cache -a {p} ping",
        "ldapsearch -x -D cn=admin -w {p}",
        "openssl pkcs12 -export -out b.p12 -passout pass:{p}",
        "keytool -list -keystore app.jks -storepass {p}",
        "smbclient //fs01/share -U backup%{p}",
        "7z a backup.7z -p{p} dump.sql",
        "svn co https://svn.acme.io/trunk --username build --password {p}",
        "wget --user=deploy --password={p} https://artifacts.acme.io/app.tgz",
    ],
)
def test_command_line_password_flags(command: str) -> None:
    match = find_secret(command.format(p=_password()))
    assert match is not None and match.kind in {"cli_password", "password_assignment"}, (match, command)


def test_a_word_typed_after_a_password_flag_is_a_password() -> None:
    """Decision: on a command line the value is the password as typed, so words count there, while
    ``password=secret`` in a config stays a placeholder (the word is also how templates are written)."""
    assert find_secret("sshpass -p secret ssh pi@raspberry.local") == SecretMatch(
        "cli_password", "a password on a command line"
    )
    assert find_secret("mysql -uroot -pSecret wordpress") is not None
    assert find_secret("password=secret") is None
    assert find_secret("mysql -uroot -proot wordpress") is None


@pytest.mark.parametrize(
    "text",
    [
        "mysql -u root -p shop prompts for the password.",
        "mysql -h db.internal -P 3306 -u report -p reports",
        "ssh -p 2222 deploy@bastion.acme.io",
        "docker run -d -p 5432:5432 postgres:16",
        "mkdir -p /var/lib/memory",
        'sshpass -p "$SSH_PASS" ssh pi@lab',
        "echo $TOKEN | docker login ghcr.io -u ci --password-stdin",
        "redis-cli -a option is deprecated in favour of REDISCLI_AUTH.",
        "Use --password-file=/run/secrets/db instead of --password on the command line.",
        "openssl rsa -in enc.key -passin file:/run/secrets/keypass",
        "unzip -p archive.zip notes.txt",
    ],
)
def test_command_lines_without_a_password(text: str) -> None:
    assert find_secret(text) is None


def test_webhook_urls() -> None:
    discord = f"https://discord.com/api/webhooks/{_random(19, string.digits)}/{_random(68)}"
    guid = "2f1c0b7e-3a9d-4f6e-9b1a-5c2d8e7f6a40"
    teams = (
        f"https://acme.webhook.office.com/webhookb2/{guid}@{guid}/IncomingWebhook/{_random(32, _HEX)}/{guid}"
    )
    workflow = (
        f"https://prod-12.westeurope.logic.azure.com:443/workflows/{_random(32, _HEX)}/triggers/manual/"
        f"paths/invoke?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig={_random(43)}"
    )
    slack = f"https://hooks.slack.com/services/T{_random(8).upper()}/B{_random(10).upper()}/{_random(24)}"
    assert find_secret(f"Alerts go to {discord}") == SecretMatch("discord_webhook", "a Discord webhook URL")
    assert find_secret(teams) == SecretMatch("teams_webhook", "a Microsoft Teams webhook or workflow URL")
    assert find_secret(workflow) == SecretMatch("teams_webhook", "a Microsoft Teams webhook or workflow URL")
    assert find_secret(slack) == SecretMatch("slack_webhook", "a Slack webhook URL")
    assert find_secret("Join us at https://discord.gg/memory-mcp") is None
    assert find_secret("Webhook URLs look like https://discord.com/api/webhooks/<id>/<token>.") is None


def test_cloud_oauth_secrets() -> None:
    google = SecretMatch("google_oauth", "a Google OAuth client secret or access token")
    assert find_secret(f"client secret GOCSPX-{_random(28)}") == google
    assert find_secret(f"gcloud access token ya29.{_random(120)}") == google
    assert find_secret(f"AZURE_CLIENT_SECRET=abc8Q~{_random(34)}") == SecretMatch(
        "azure_client_secret", "an Azure AD client secret"
    )
    assert find_secret("Google OAuth client secrets start with GOCSPX-, so scanners know them.") is None


def test_base64_encoded_private_key_but_not_a_certificate() -> None:
    body = base64.b64encode(random.Random(4).randbytes(96)).decode()
    pem = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{body}\n-----END OPENSSH PRIVATE KEY-----\n"
    cert = pem.replace("OPENSSH PRIVATE KEY", "CERTIFICATE")
    encoded = base64.b64encode(pem.encode()).decode()
    assert encoded.startswith("LS0tLS1CRUdJTi")
    assert find_secret(f"tls.key: {encoded}") == SecretMatch("private_key", "a private key")
    assert find_secret(f"tls.crt: {base64.b64encode(cert.encode()).decode()}") is None
    header_only = base64.b64encode(b"-----BEGIN PRIVATE KEY-----").decode()
    assert find_secret(f"Encoded keys start with {header_only}") is None


@pytest.mark.parametrize(
    "template",
    [
        "jeton d'accès pour l'API des factures {s}",
        "clave secreta del webhook {s}",
        "a chave de API do parceiro {s}",
        "geheime sleutel voor de export {s}",
        "klucz API {s}",
        "Der API-Schlüssel vom Wetterdienst: {s}",
    ],
)
def test_random_string_next_to_a_credential_word_in_many_languages(template: str) -> None:
    assert find_secret(template.format(s=_random(32))) is not None


def test_lowercase_token_next_to_a_credential_word_but_not_an_uppercase_id() -> None:
    token = _random(32, string.ascii_lowercase + string.digits, seed=12)
    ulid = _random(26, "0123456789ABCDEFGHJKMNPQRSTVWXYZ", seed=12)
    assert find_secret(f"Sentry auth token for source maps: {token}") is not None
    assert find_secret(f"The idempotency key for the retried payment was {ulid}.") is None


def test_documented_example_keys_pass_only_as_marked_examples() -> None:
    """Decision: the vendors' documented keys look real to every scanner downstream, so they pass
    only in a text that calls them examples; alone or in a config line they are refused."""
    assert find_secret("AKIAIOSFODNN7EXAMPLE") == SecretMatch("aws_access_key", "an AWS access key ID")
    secret = SecretMatch("aws_secret_key", "an AWS secret access key")
    assert find_secret("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY") == secret
    assert find_secret("aws_secret_access_key = je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY") == secret
    assert find_secret("The AWS docs use a sample key id that ends in EXAMPLE.") is None
    assert find_secret("The AWS docs show AKIAIOSFODNN7EXAMPLE as the example access key id.") is None
    assert find_secret("je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY is the other sample.") is None
    assert (
        find_secret("Stripe's documentation uses sk_test_4eC39HqLyjWDarjtT1zdp7dc in its examples.") is None
    )
    assert find_secret("Das Beispiel aus der Doku: AKIAI44QH8DHBEXAMPLE") is None
    # The word marks the documented key only: a real key beside it is still found.
    real = "AKIA" + _random(16, string.ascii_uppercase + string.digits, seed=31)
    assert find_secret(f"Example from the docs: AKIAIOSFODNN7EXAMPLE; ours is {real}") is not None


@pytest.mark.parametrize(
    "text",
    [
        "Rotate the database password every 90 days.",
        "The token expires after an hour.",
        "Passwort vergessen? Use the reset page.",
        "Mot de passe oublié ? Cliquez sur le lien.",
        "Le mot de passe est stocké haché avec Argon2id.",
        "¿Olvidaste tu contraseña? Usa la página de recuperación.",
        "La palabra clave es Kubernetes en todos los documentos.",
        "A senha precisa de pelo menos doze caracteres.",
        "Het wachtwoord moet minstens twaalf tekens bevatten.",
        "Hasło musi mieć co najmniej dwanaście znaków.",
        "Şifrenizi kimseyle paylaşmayın.",
        "The password must be at least 12 characters and is hashed with SHA256.",
        "Password: v2.3.1-rc is the release that enforces the new policy.",
        "password: !vault | is the Ansible Vault marker.",
        "helm upgrade memory ./chart --set auth.existingSecret=memory-keys",
        "Our own API keys start with mmk_ followed by a ten-character prefix.",
        "Zugangsdaten bitte nur über den Passwortmanager teilen.",
    ],
)
def test_sentences_about_credentials_in_many_languages(text: str) -> None:
    assert find_secret(text) is None


def test_find_secret_in_fields_names_the_field() -> None:
    token = f"ghp_{_random(36)}"
    assert find_secret_in_fields(title="Deploy notes", category="ops", content="All good.") is None
    assert find_secret_in_fields(title="CI", category=None, content=f"token {token}") == (
        "content",
        SecretMatch("github_token", "a GitHub token"),
    )
    found = find_secret_in_fields(category=f"password={_password()}", content=f"token {token}")
    assert found is not None and found[0] == "category"


def test_base64_values_are_judged_by_what_they_decode_to() -> None:
    """Kubernetes Secret data is base64: a manual's placeholder stays one, a real password does not."""
    placeholder = base64.b64encode(b"mmk_3f9a...").decode()
    password = base64.b64encode(_password().encode()).decode()
    assert find_secret(f"data:\n  api-key: {placeholder}") is None
    assert find_secret(f"data:\n  password: {password}") is not None


# ---------------------------------------------------------------------------------------------
# Vendor prefixes, unsigned JWTs, named keys, PEM frames, URL user-info: each family with its
# near-misses. Every value is generated here; none is copied from a scanner's test corpus.
# ---------------------------------------------------------------------------------------------

_B64URL = _B62 + "-_"
_UPPER_DIGITS = string.ascii_uppercase + string.digits


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


@pytest.mark.parametrize(
    "prefix",
    ["glpat-", "gloas-", "gldt-", "glrt-", "glcbt-", "glptt-", "glft-", "glimt-", "glagent-", "glsoat-",
     "glffct-", "GR1348941"],
)  # fmt: skip
def test_every_gitlab_token_prefix_is_a_gitlab_token(prefix: str) -> None:
    token = prefix + _random(24, _B64URL, seed=len(prefix))
    assert find_secret(f"CI_JOB_TOKEN_FALLBACK={token}") == SecretMatch("gitlab_token", "a GitLab token")
    assert find_secret(f"the runner uses {token} since Monday") is not None
    assert find_secret(f"{prefix}{'x' * 24}") is None
    assert find_secret(f"GitLab tokens of this kind start with {prefix} and are rotated yearly.") is None


def test_gitlab_routable_token_and_session_cookie() -> None:
    routable = f"glpat-{_random(27, _B64URL)}.01.{_random(9, string.ascii_lowercase + string.digits)}"
    assert find_secret(f"token: {routable}") == SecretMatch("gitlab_token", "a GitLab token")
    cookie = f"Cookie: _gitlab_session={_random(32, _HEX)}"
    assert find_secret(cookie) == SecretMatch("gitlab_token", "a GitLab token")


@pytest.mark.parametrize(
    ("make", "service"),
    [
        (lambda: f"pypi-AgEIcHlwaS5vcmc{_random(60, _B64URL)}", "PyPI"),
        # The token of another index (here test.pypi.org), cut short in a paste: still a token.
        (
            lambda: "pypi-" + _b64url(b"\x02\x01\x0dtest.pypi.org\x02")[:-1] + _random(40, _B64URL),
            "test PyPI",
        ),
        (lambda: f"hvs.{_random(96, _B64URL)}", "Vault"),
        (lambda: f"dp.st.prd.{_random(43)}", "Doppler"),
        (lambda: f"sntryu_{_random(64, _HEX)}", "Sentry"),
        (lambda: f"xkeysib-{_random(64, _HEX)}-{_random(16)}", "Brevo"),
        (lambda: f"pscale_pw_{_random(43, _B64URL)}", "PlanetScale"),
        (lambda: f"dt0c01.{_random(24, _UPPER_DIGITS)}.{_random(64)}", "Dynatrace"),
        (lambda: f"NRAK-{_random(27, _UPPER_DIGITS)}", "New Relic"),
        (lambda: f"rubygems_{_random(48, _HEX)}", "RubyGems"),
        (lambda: f"LTAI{_random(20)}", "Alibaba"),
        (lambda: f"sq0csp-{_random(43, _B64URL)}", "Square"),
        (lambda: f"pplx-{_random(48)}", "Perplexity"),
        (lambda: f"sha256~{_random(43, _B64URL)}", "OpenShift"),
        (lambda: f"{_random(32, _HEX)}-us{random.Random(3).randint(1, 21)}", "Mailchimp"),
    ],
)
def test_vendor_tokens_from_the_prefix_table(make: Callable[[], str], service: str) -> None:
    token = make()
    for text in (token, f"{service} token: {token}", f'"{token}"', f"export TOKEN={token}"):
        match = find_secret(text)
        assert match is not None and match.kind == "service_token", (service, text, match)


def test_vendor_prefix_near_misses_pass() -> None:
    md5 = _random(32, _HEX, seed=4)
    for text in (
        f"The file's MD5 is {md5} and its locale en-us.",
        f"{md5}-usage.csv was uploaded to the bucket.",
        "PyPI tokens start with pypi- and the upload uses __token__ as the user name.",
        f"Vault paths such as hvs.{'x' * 96} are masked in the logs.",
        "Our Dynatrace tenant is dt0c01 in the EU region.",
        f"sha256:{_random(64, _HEX)} is the image digest.",
        f"xkeysib-{'*' * 64}-{'*' * 16}",
        f"path/to/patient_records_{_random(8, '0123456789')}.csv",
    ):
        assert find_secret(text) is None, text


def _discord_bot_token(seed: int, signature: int = 27) -> str:
    rng = random.Random(seed)
    bot_id = str(rng.randint(10**17, 10**19 - 1))
    return ".".join(
        (
            _b64url(bot_id.encode()),
            _random(6, _B64URL, seed=seed),
            _random(signature, _B64URL, seed=seed + 1),
        )
    )


@pytest.mark.parametrize(("seed", "signature"), [(1, 27), (2, 27), (3, 38), (4, 38)])
def test_discord_bot_tokens(seed: int, signature: int) -> None:
    token = _discord_bot_token(seed, signature)
    assert find_secret(f"DISCORD_TOKEN={token}") == SecretMatch("discord_token", "a Discord bot token")
    assert find_secret(f"bot.run('{token}')") is not None


def test_discord_client_secret_after_the_service_name() -> None:
    text = f"Discord client secret: {_random(32, _B64URL, seed=9)}"
    assert find_secret(text) is not None


def test_dotted_values_that_are_not_discord_tokens() -> None:
    token = _discord_bot_token(5)
    head, middle, _ = token.split(".")
    for text in (
        f"x{token}",  # inside a longer token: the id part is too long
        f"{head}.{middle}.{'x' * 27}",  # the signature is a mask (a repeated 'a' is a test key)
        "com.example.memory.server.configuration.loader",
        f"traceparent: 00-{_random(32, _HEX)}-{_random(16, _HEX)}-01",
        f"{head}.{middle}",
    ):
        assert find_secret(text) is None, text


def test_unsigned_and_truncated_jwts() -> None:
    payload = _b64url(json.dumps({"sub": _random(10, _HEX), "role": "admin", "iat": 1735689600}).encode())
    unsecured = _b64url(b'{"alg":"none","typ":"JWT"}')
    signed = _b64url(b'{"alg":"HS256","typ":"JWT"}')
    for text in (f"{unsecured}.{payload}.", f"{unsecured}.{payload}", f"Authorization: {signed}.{payload}"):
        match = find_secret(text)
        assert match is not None and match.kind in {"jwt", "bearer_token"}, text


def test_base64_json_that_is_not_a_jwt() -> None:
    no_alg = _b64url(b'{"typ":"JWT","kid":"2024-05"}')
    header = _b64url(b'{"alg":"none"}')
    not_json = _b64url(b"just some text, not json")
    for text in (f"{no_alg}.{no_alg}", f"{header}.{not_json}", f"header {header} alone"):
        assert find_secret(text) is None, text


@pytest.mark.parametrize(
    "template",
    [
        "orbital_key = {v}",
        "orbital-cloud-key: {v}",
        '"quarry_iam_key" := "{v}"',
        "QUARRY_KEY={v}",
        "mailjet_key:'{v}'",
        "deploy --orbital-api-key {v}",
    ],
)
def test_a_key_named_after_its_service_needs_no_randomness(template: str) -> None:
    """``abcd1234abcd1234...`` after ``<service>_key`` is a key, however regular it looks."""
    repeated = (_random(4, string.ascii_lowercase, seed=2) + _random(4, "0123456789", seed=2)) * 5
    match = find_secret(template.format(v=repeated))
    assert match is not None, template


@pytest.mark.parametrize(
    "text",
    [
        f"cache_key: {_random(64, _HEX, seed=6)}",
        f"idempotency-key: {_random(40, _HEX, seed=7)}",
        "sort_key = createdAtTimestampUtc2024",
        "partition_key: tenant_2024_05_region_eu_west",
        f"recaptcha_site_key = 6Lc{_random(37, _B64URL, seed=8)}",
        "public_key: /etc/memory/keys/signing-2024.pub",
        "routing_key = orders.created.v2.eu-west-1",
        "The api-key option takes the key from the environment.",
        f"object_key: uploads/2024/{_random(12, _HEX)}.pdf",
        f"translation_key: checkout.summary.title{random.Random(1).randint(1, 9)}",
        "session_key = ${SESSION_KEY}",
        "orbital_key = <your-orbital-key>",
        "orbital_key: xxxxxxxxxxxxxxxxxxxxxxxx",
        "orbital_key = 12345678901234567890123",
        f"job_key: {_random(8, _HEX)}-{_random(4, _HEX)}-{_random(4, _HEX)}-{_random(4, _HEX)}-{_random(12, _HEX)}",
    ],
)
def test_keys_that_are_identifiers_not_credentials(text: str) -> None:
    assert find_secret(text) is None


def _pem_lines(seed: int) -> list[str]:
    body = base64.b64encode(random.Random(seed).randbytes(180)).decode()
    return [body[i : i + 64] for i in range(0, len(body), 64)]


def test_private_key_lines_quoted_or_commented() -> None:
    lines = _pem_lines(3)
    for marker in ("> ", "# ", "// ", '"', " * "):
        block = "\n".join(
            marker + line
            for line in ("-----BEGIN RSA PRIVATE KEY-----", *lines, "-----END RSA PRIVATE KEY-----")
        )
        match = find_secret(f"From the old thread:\n{block}")
        assert match is not None and match.kind == "private_key", marker


def test_a_private_key_frame_holds_a_key_whatever_its_body() -> None:
    scrambled = "\n".join(f"{line[:20]} {line[20:]}!" for line in _pem_lines(4))
    block = f"-----BEGIN EC PRIVATE KEY-----\n{scrambled}\n-----END EC PRIVATE KEY-----"
    assert find_secret(block) == SecretMatch("private_key", "a private key")
    escaped = block.replace("\n", "\\n")
    assert find_secret(f'{{"key": "{escaped}"}}') is not None


@pytest.mark.parametrize(
    "text",
    [
        "-----BEGIN PRIVATE KEY-----\n...\n-----END PRIVATE KEY-----",
        "-----BEGIN RSA PRIVATE KEY-----\n<your key here>\n-----END RSA PRIVATE KEY-----",
        "-----BEGIN PRIVATE KEY-----\nREDACTED\n-----END PRIVATE KEY-----",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n-----END OPENSSH PRIVATE KEY-----",
        "The file runs from -----BEGIN PRIVATE KEY----- to the matching -----END PRIVATE KEY----- line.",
        "Paste the block starting with -----BEGIN PRIVATE KEY-----\ninto the vault, never into a memory.",
    ],
)
def test_private_key_frames_around_stand_ins_or_prose(text: str) -> None:
    assert find_secret(text) is None


def test_url_user_info_in_and_out_of_quotes() -> None:
    password = _password(8)
    for text in (
        f"git clone https://deploy:{password}@git.example.org/ops/infra.git",
        f'DATABASE_URL="postgres://app:{password}@db.internal:5432/app"',
        f"url = 'amqp://worker:{password}@mq:5672/'",
    ):
        assert find_secret(text) == SecretMatch(
            "connection_string_password", "a connection string with an embedded password"
        ), text
    for text in (
        'proxy = "https://proxy.internal:8080";@include "defaults.conf"',
        "'http://cache:6379';@reload",
        "`https://api.example.org:443`@v2",
    ):
        assert find_secret(text) is None, text


def test_values_that_call_themselves_fake_are_stand_ins() -> None:
    assert find_secret('password = "myfakevalue"') is None
    assert find_secret("api_secret: FAKE-SECRET-FOR-TESTS-123") is None
    assert find_secret(f'password = "{_password(9)}"') is not None


def test_a_spacing_accent_inside_a_value_does_not_split_it() -> None:
    """NFKC turns ``¨`` into a space and a combining mark; the value must stay one."""
    assert find_secret("db_password: '%¨*@!?#&'") is not None
    assert find_secret(f"pwd = '{_password(10)}´'") is not None
    assert find_secret("Das Passwort enthält kein ¨ und kein ´.") is None


def test_a_token_prefix_alone_is_where_a_key_goes_not_a_key() -> None:
    assert find_secret('contentful_access_token: "CFPAT-"') is None
    assert find_secret("STRIPE_SECRET_KEY=sk_live_") is None
    body = _random(24, string.ascii_letters + string.digits, seed=41)
    assert find_secret(f'contentful_access_token: "CFPAT-{body}"') is not None
    assert find_secret(f"STRIPE_SECRET_KEY=sk_live_{body}") is not None


def test_nul_characters_and_terminal_colours_are_removed_before_matching() -> None:
    """The store refuses control characters before this check; imports and other callers read
    UTF-16 text as bytes (``p\\0a\\0...``) and terminal logs with colour codes glued to a token."""
    token = f"ghp_{_random(36, seed=226)}"
    assert find_secret(f"\x1b[94m{token}\x1b[0m") is not None
    assert find_secret("\x1b[94mghp_ tokens are GitHub's\x1b[0m") is None
    assert find_secret("\x00".join('"password": "Rk4vQ9zLm2"')) is not None
    assert find_secret("\x00".join('"password": "required"')) is None
