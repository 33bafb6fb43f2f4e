"""Each credential family the detector knows, through the store: a memory holding one is refused and
nothing is stored; a look-alike of it is saved. Against real PostgreSQL."""

from __future__ import annotations

import base64
import json
import random
import string

import pytest

from memory_mcp.store import identity, memories
from memory_mcp.store.access import Access
from memory_mcp.store.db import Database
from memory_mcp.store.errors import SecretRefused
from memory_mcp.store.models import SpaceContext
from tests.factories import make_key, make_space, make_user

_B62 = string.ascii_letters + string.digits
_B64 = _B62 + "+/"
_LOWER36 = string.ascii_lowercase + string.digits
_UPPER36 = string.ascii_uppercase + string.digits
_HEX = "0123456789abcdef"


def _random(n: int, alphabet: str = _B62, seed: int = 7) -> str:
    rng = random.Random(f"{seed}-{n}-{alphabet}")
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _docker_config(auth: str) -> str:
    return json.dumps({"auths": {"registry.example.com": {"auth": base64.b64encode(auth.encode()).decode()}}})


_AZURE_KEY = base64.b64encode(random.Random(3).randbytes(64)).decode()
_UUID = "3f2b8c1e-9d4a-4e6b-a7c5-1f0e2d3c4b5a"
_UNSIGNED_HEADER = _b64url(json.dumps({"alg": "none", "typ": "JWT"}).encode())
_PAYLOAD = _b64url(json.dumps({"sub": "42", "role": "admin", "iat": 1735689600}).encode())

# (family, a memory holding one, a look-alike that is not one)
FAMILIES: list[tuple[str, str, str]] = [
    (
        "key=value in a log line",
        f"[DEBUG] Using Key={_random(32)}",
        "[DEBUG] Using Key=lastModifiedTimestamp",
    ),
    (
        "a password full of template-like symbols",
        'db_password = "k9{{t}a)r${w]z(ub[m>-_$#v}}"',
        'db_password = "{{ .Values.db.password | b64enc }}"',
    ),
    (
        "a comparison with a literal",
        'if (api_key == "Sunflower-2024!") {',
        "if (password == confirmPassword) {",
    ),
    (
        "the literal first in a comparison",
        f'if ("{_random(20, seed=2)}" != db_pass) {{',
        'if ("admin" != role) {',
    ),
    (
        "a C array",
        'char db_password[] = "T7r!ckyPass";',
        'char password_hint[] = "the name of the first pet";',
    ),
    (
        "a numbered name",
        'DB_PASSWORD_2 = "Harbour!Light7"',
        'DB_PASSWORD_2 = "DB_PASSWORD_SECONDARY"',
    ),
    (
        "a C# verbatim string",
        'password = @"P4ss!word-2024";',
        'password = @"${DB_PASSWORD}";',
    ),
    (
        "a passphrase of four or more words",
        'password = "tangerine orbit velvet compass"',
        'password = "too short again"',
    ),
    (
        "a French name written without its accent (clé secrète)",
        'cle_secrete = "Lune&Soleil#42"',
        'cle_secrete = "${CLE_SECRETE}"',
    ),
    (
        "a camelCase key",
        f'const fastlyKey = "{_random(32, _B62 + "-", seed=4)}"',
        'const cacheKey = "user:1234:profile:v2"',
    ),
    (
        "an XML element named after a password",
        "<server><id>nexus</id><password>Winter!2024x</password></server>",
        "<server><id>nexus</id><password>${env.NEXUS_PASSWORD}</password></server>",
    ),
    (
        "a Jenkins secret",
        f"<secret>{{AQAAABAAAAAQ{_random(60, _B64, seed=5)}=}}</secret>",
        "<secret>{{ credentials('deploy') }}</secret>",
    ),
    (
        "a Docker registry auth",
        _docker_config("deploy:S3cr3t-Pa55"),
        _docker_config("deploy:changeme"),
    ),
    (
        "a header name and its value as literals",
        f'req.Header.Set("X-Api-Key", "{_random(32, _HEX, seed=6)}")',
        'req.Header.Set("X-Api-Key", apiKey)',
    ),
    (
        "an Azure storage key on the line after its name",
        f"storageAccountKey:\n  value: {_AZURE_KEY}",
        "storageAccountKey:\n  value: ${AZURE_STORAGE_KEY}",
    ),
    (
        "a test key filled with one character",
        "AKIAZZZZZZZZZZZZZZZZ",
        "AWS key ids look like AKIAXXXXXXXXXXXXXXXX",
    ),
    (
        "a test key of a repeated unit",
        'acme_key = "qrstuvwxyzqrstuvwxyzqrst"',
        'acme_key = "xxxxxxxxxxxxxxxxxxxxxxxx"',
    ),
    (
        "a repeated test key in a vendor's format",
        f"VAULT_TOKEN=hvb.{'b' * 150}",
        f"VAULT_TOKEN=hvb.{'x' * 150}",
    ),
    (
        "AWS STS bearer and context key ids",
        f"ABIA{_random(16, _UPPER36, seed=8)} and ACCA{_random(16, _UPPER36, seed=9)}",
        "ABIA and ACCA are prefixes of AWS key ids",
    ),
    (
        "a UUID as a bearer token",
        f"Authorization: Bearer {_UUID}",
        "Authorization: Bearer 00000000-0000-0000-0000-000000000000",
    ),
    (
        "LangSmith",
        f"lsv2_pt_{_random(32, _HEX, seed=10)}_{_random(10, _HEX, seed=11)}",
        f"lsv2_pt_{_random(12, _HEX, seed=10)}",
    ),
    ("Rootly", f"rootly_{_random(64, _HEX, seed=12)}", "rootly_api_docs"),
    ("Apify", f"apify_api_{_random(36, seed=13)}", "apify_api_client"),
    ("Alchemy", f"alcht_{_random(30, seed=14)}", "alcht_short"),
    ("Bitbucket Data Center", f"BBDC-{_random(44, _B64, seed=15)}", "BBDC-1234 is the ticket"),
    ("AWS AppSync", f"da2-{_random(26, _LOWER36, seed=16)}", "da2-endpoint"),
    ("Octopus Deploy", f"API-{_random(26, _UPPER36, seed=17)}", "API-GATEWAY-CONFIGURATION"),
    (
        "Tableau personal access token",
        f"{_random(22, _B64, seed=18)}==:{_random(32, seed=19)}",
        "ratio==:ok",
    ),
    ("MaxMind", f"LicenseKey {_random(6, seed=20)}_{_random(29, seed=21)}_mmk", "the file ends in _mmk"),
    (
        "Discord bot token",
        ".".join((_b64url(b"1234567890123456789"), _random(6, seed=22), _random(27, _B62 + "_-", seed=23))),
        "com.example.memory.server.configuration.loader",
    ),
    ("Mailchimp", f"MAILCHIMP={_random(32, _HEX, seed=24)}-us6", f"build {_random(32, _HEX, seed=24)}-usa"),
    ("GitLab", f"glpat-{_random(20, _B62 + '_-', seed=25)}", "glpat-xxxxxxxxxxxxxxxxxxxx"),
    (
        "an unsigned JWT",
        f"{_UNSIGNED_HEADER}.{_PAYLOAD}.",
        f"{_UNSIGNED_HEADER} is how an unsigned header starts",
    ),
]


async def _writer(db: Database) -> SpaceContext:
    await make_space(db, "team")
    user = await make_user(db)
    caller = await identity.authenticate(db, await make_key(db, user, {"team": Access.READ_WRITE}, "team"))
    return identity.resolve_space(caller, None)


@pytest.mark.parametrize(("family", "secret", "look_alike"), FAMILIES, ids=[f[0] for f in FAMILIES])
async def test_a_credential_is_refused_and_its_look_alike_saved(
    db: Database, family: str, secret: str, look_alike: str
) -> None:
    ctx = await _writer(db)
    with pytest.raises(SecretRefused) as refused:
        await memories.save_memory(db, ctx, f"Note for the team: {secret}")
    assert refused.value.field == "content", family
    assert (await memories.list_memories(db, ctx)).items == [], family
    saved = await memories.save_memory(db, ctx, f"Note for the team: {look_alike}")
    assert saved.created and look_alike in saved.memory.content, family
