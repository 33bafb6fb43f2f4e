"""Vendor token formats recognised by their prefix, and password-hash formats recognised by their
scheme tag: the data behind the prefix and hash rules of `secrets`.

Each entry is a service's published token format: a literal prefix, exactly as the vendor writes
it, and the shape of what follows. `secrets` compiles the entries of each kind into one rule that
is tried only where one of the prefixes occurs (found with ``str.find`` on the lowercased text), so
a new format costs one substring search per save, not one more regular expression scan. A match
must not follow a letter, digit, ``_`` or ``-`` and must not be followed by one, and its value
must not be a mask or a stand-in (``glpat-xxxxxxxxxxxxxxxxxxxx``).

The formats follow the vendors' documentation as the gitleaks rule set collects it (gitleaks,
MIT licence, ``cmd/generate/config/rules``), or the vendor's own where gitleaks has no rule (LangSmith,
Rootly, Apify, Alchemy, Bitbucket Data Center, AppSync); the patterns here are written for this module. Bodies
are as long as the vendor's or longer: a token cut short in a paste is still a token.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenFormat:
    """A token that starts with a fixed prefix: ``kind`` names the refusal (`secrets.SECRET_KINDS`)."""

    kind: str
    service: str
    prefix: str
    body: str


_B64URL = r"[A-Za-z0-9_-]"
# GitLab's routable tokens end in ``.<2 characters>.<7 characters>`` after the random part.
_GITLAB_BODY = _B64URL + r"{20,}(?:\.[0-9a-z]{2}\.?[0-9a-z]{7})?"
_VAULT_SHORT = r"(?=[A-Za-z]*[0-9])[A-Za-z0-9]{24}"

TOKEN_FORMATS: tuple[TokenFormat, ...] = (
    # GitLab: every token type has a prefix of its own (GitLab's "token overview").
    *(
        TokenFormat("gitlab_token", f"GitLab {name}", prefix, _GITLAB_BODY)
        for prefix, name in (
            ("glpat-", "personal, project or group access token"),
            ("gloas-", "OAuth application secret"),
            ("gldt-", "deploy token"),
            ("glrt-", "runner authentication token"),
            ("GR1348941", "runner registration token (legacy)"),
            ("glcbt-", "CI/CD job token"),
            ("glptt-", "pipeline trigger token"),
            ("glft-", "feed token"),
            ("glimt-", "incoming mail token"),
            ("glagent-", "Kubernetes agent token"),
            ("glsoat-", "SCIM token"),
            ("glffct-", "feature flags client token"),
            ("glwt-", "workspace token"),
        )
    ),
    TokenFormat("gitlab_token", "GitLab session cookie", "_gitlab_session=", r"[0-9a-f]{32}"),
    # Package registries.
    # A PyPI token is a macaroon: ``AgE`` is its version and location field, whatever the index
    # (pypi.org, test.pypi.org, a private one); a truncated one still holds the key material.
    TokenFormat("service_token", "PyPI", "pypi-AgE", _B64URL + "{30,}"),
    TokenFormat("service_token", "RubyGems", "rubygems_", r"[a-f0-9]{48}"),
    TokenFormat("service_token", "Clojars", "CLOJARS_", r"[A-Za-z0-9]{60}"),
    TokenFormat("service_token", "JFrog Artifactory", "AKCp", r"[A-Za-z0-9]{69}"),
    TokenFormat("service_token", "JFrog Artifactory reference token", "cmVmd", r"[A-Za-z0-9]{59}"),
    # Cloud and infrastructure.
    *(
        TokenFormat("service_token", "DigitalOcean", prefix, r"[a-f0-9]{64}")
        for prefix in ("dop_v1_", "doo_v1_", "dor_v1_")
    ),
    TokenFormat("service_token", "Alibaba Cloud access key id", "LTAI", r"[A-Za-z0-9]{12,20}"),
    TokenFormat("service_token", "Amazon Bedrock API key", "ABSK", r"[A-Za-z0-9+/]{109,269}={0,2}"),
    # Cloudflare's origin CA keys: 24 hex, then 146; read with wider bounds (copies with a longer first part).
    TokenFormat("service_token", "Cloudflare origin CA key", "v1.0-", r"[a-z0-9]{24,64}-[a-f0-9]{100,200}"),
    *(
        TokenFormat("service_token", "Fly.io", prefix, body)
        for prefix, body in (
            ("fo1_", _B64URL + "{43}"),
            ("fm1a_", r"[A-Za-z0-9+/]{100,}={0,3}"),
            ("fm1r_", r"[A-Za-z0-9+/]{100,}={0,3}"),
            ("fm2_", r"[A-Za-z0-9+/]{100,}={0,3}"),
        )
    ),
    TokenFormat("service_token", "Heroku", "HRKU-AA", _B64URL + "{58}"),
    TokenFormat("service_token", "AWS AppSync API key", "da2-", r"[a-z0-9]{26}"),
    TokenFormat("service_token", "Octopus Deploy", "API-", r"[A-Z0-9]{26}"),
    # Amazon Marketplace Web Service auth tokens: ``amzn.mws.`` and a UUID.
    TokenFormat(
        "service_token",
        "Amazon MWS auth token",
        "amzn.mws.",
        r"[0-9a-z]{8}-[0-9a-z]{4}-[0-9a-z]{4}-[0-9a-z]{4}-[0-9a-z]{12}",
    ),
    # HashiCorp Vault (1.10+, "Tokens" in Vault's docs): ``hvs.`` service, ``hvb.`` batch and ``hvr.``
    # recovery tokens. With server-side consistent tokens a service token carries its index and runs
    # to 90+ characters; without them the body is 24 base62 characters (random, so with a digit).
    *(
        TokenFormat("service_token", "HashiCorp Vault", prefix, body)
        for prefix, body in (
            ("hvs.", _B64URL + "{90,120}"),
            ("hvr.", _B64URL + "{90,120}"),
            ("hvb.", _B64URL + "{138,300}"),
            ("hvs.", _VAULT_SHORT),
            ("hvr.", _VAULT_SHORT),
        )
    ),
    TokenFormat("service_token", "OpenShift user token", "sha256~", _B64URL + "{43}"),
    TokenFormat("service_token", "Pulumi", "pul-", r"[a-f0-9]{40}"),
    *(
        TokenFormat("service_token", "PlanetScale", prefix, r"[A-Za-z0-9_=.-]{32,64}")
        for prefix in ("pscale_tkn_", "pscale_oauth_", "pscale_pw_")
    ),
    TokenFormat("service_token", "Scalingo", "tk-us-", _B64URL + "{48}"),
    TokenFormat("service_token", "Infracost", "ico-", r"[A-Za-z0-9]{32}"),
    TokenFormat("service_token", "Prefect", "pnu_", r"[A-Za-z0-9]{36}"),
    # Databricks writes its tokens in lowercase hex; a key pasted in capitals is the same key.
    TokenFormat("service_token", "Databricks", "dapi", r"(?:[a-f0-9]{32}|[A-F0-9]{32})(?:-\d)?"),
    # Cloudflare's scannable credentials: ``cfk_`` API keys, ``cfut_`` user and ``cfat_`` account API
    # tokens, 40 base62 characters and an 8-hex checksum.
    *(
        TokenFormat("service_token", "Cloudflare", prefix, r"[A-Za-z0-9]{40}[a-fA-F0-9]{8}")
        for prefix in ("cfk_", "cfut_", "cfat_")
    ),
    # Vercel: ``vcp_`` personal, ``vci_`` integration, ``vca_``/``vcr_`` app access and refresh tokens,
    # ``vck_`` AI Gateway keys.
    *(
        TokenFormat("service_token", "Vercel", prefix, r"[A-Za-z0-9]{24,}")
        for prefix in ("vcp_", "vci_", "vca_", "vcr_", "vck_")
    ),
    # Docker Hub personal (``dckr_pat_``) and organisation (``dckr_oat_``) access tokens.
    *(
        TokenFormat("service_token", "Docker Hub", prefix, _B64URL + "{27,}")
        for prefix in ("dckr_pat_", "dckr_oat_")
    ),
    *(
        TokenFormat("service_token", "Doppler", prefix, r"(?:[a-z0-9_-]{1,40}\.)?[A-Za-z0-9]{40,44}")
        for prefix in ("dp.pt.", "dp.st.", "dp.ct.", "dp.sa.", "dp.scim.", "dp.audit.")
    ),
    TokenFormat("service_token", "Dynatrace", "dt0c01.", r"[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}"),
    *(
        TokenFormat("service_token", "Harness", prefix, _B64URL + r"{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}")
        for prefix in ("pat.", "sat.")
    ),
    # Monitoring and developer tools.
    TokenFormat("service_token", "Grafana service account", "glsa_", r"[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}"),
    TokenFormat("service_token", "Grafana Cloud", "glc_", r"[A-Za-z0-9+/]{32,}={0,2}"),
    TokenFormat("service_token", "Grafana API key", "eyJrIjoi", r"[A-Za-z0-9]{40,400}={0,2}"),
    TokenFormat("service_token", "PostHog personal API key", "phx_", r"[A-Za-z0-9_]{40,}"),
    TokenFormat("service_token", "New Relic user API key", "NRAK-", r"[A-Z0-9]{27}"),
    TokenFormat("service_token", "New Relic insert key", "NRII-", r"[A-Za-z0-9_-]{32}"),
    TokenFormat("service_token", "Sentry user token", "sntryu_", r"[a-f0-9]{64}"),
    TokenFormat("service_token", "Sentry organisation token", "sntrys_eyJ", r"[A-Za-z0-9+/=_]{50,}"),
    TokenFormat("service_token", "Sourcegraph", "sgp_", r"(?:[a-fA-F0-9]{16}_|local_)?[a-fA-F0-9]{40}"),
    *(
        TokenFormat("service_token", "Linear", prefix, r"[A-Za-z0-9]{40}")
        for prefix in ("lin_api_", "lin_oauth_")
    ),
    TokenFormat("service_token", "Groq", "gsk_", r"[A-Za-z0-9]{52}"),
    *(
        TokenFormat("service_token", "LangSmith", prefix, r"[a-f0-9]{32}_[a-f0-9]{10}")
        for prefix in ("lsv2_pt_", "lsv2_sk_")
    ),
    TokenFormat("service_token", "Rootly", "rootly_", r"[a-f0-9]{64}"),
    TokenFormat("service_token", "Apify", "apify_api_", r"[A-Za-z0-9]{36}"),
    TokenFormat("service_token", "Alchemy", "alcht_", r"[A-Za-z0-9]{30}"),
    TokenFormat("service_token", "Bitbucket Data Center", "BBDC-", r"[A-Za-z0-9+/]{44}"),
    TokenFormat("service_token", "Postman", "PMAK-", r"[a-fA-F0-9]{24}-[a-fA-F0-9]{34}"),
    TokenFormat("service_token", "Postman collection access token", "PMAT-", r"[0-9A-Z]{26}"),
    TokenFormat("service_token", "Bitbucket app password", "ATBB", r"[A-Za-z0-9_=.-]{32}"),
    *(
        TokenFormat("service_token", "SonarQube", prefix, r"[a-f0-9]{40}")
        for prefix in ("squ_", "sqp_", "sqa_")
    ),
    TokenFormat("service_token", "Docker Swarm join token", "SWMTKN-1-", r"[a-z0-9]{50}-[a-z0-9]{25}"),
    TokenFormat("service_token", "Dropbox short-lived access token", "sl.", r"(?:u\.)?[A-Za-z0-9_-]{130,}"),
    TokenFormat("service_token", "Akamai client token", "akab-", r"[a-z0-9]{16}-[a-z0-9]{16}"),
    TokenFormat("service_token", "NuGet", "oy2", r"[a-z0-9]{43}"),
    TokenFormat(
        "service_token", "Heroku", "HRKU-", r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    ),
    # NATS nkey seeds: ``S``, the key's type (operator, account, user, server, cluster, curve), then
    # base32 (``SUAM...``): the private half of an nkey.
    *(TokenFormat("service_token", "NATS nkey seed", f"S{t}A", r"[A-Z2-7]{55}") for t in "OAUNCX"),
    # An NTLM authenticate message (type 3, ``NTLMSSP\0\3``) carries the challenge's response: an
    # NTLMv2 response is cracked offline to the password.
    TokenFormat(
        "service_token", "NTLM authenticate message", "TlRMTVNTUAADAAAA", r"[A-Za-z0-9+/]{40,}={0,2}"
    ),
    # OpenAI Realtime ephemeral client secrets.
    TokenFormat("service_token", "OpenAI Realtime client secret", "ek_", r"[a-f0-9]{32}"),
    TokenFormat("service_token", "Atlassian", "ATATT3", r"[A-Za-z0-9_=-]{150,}"),
    TokenFormat("service_token", "Notion", "ntn_", r"\d{11}[A-Za-z0-9]{35}"),
    TokenFormat("service_token", "Airtable personal access token", "pat", r"[A-Za-z0-9]{14}\.[a-f0-9]{64}"),
    TokenFormat("service_token", "ReadMe", "rdme_", r"[a-z0-9]{70}"),
    TokenFormat("service_token", "Typeform", "tfp_", r"[A-Za-z0-9_.=-]{59}"),
    TokenFormat("service_token", "Frame.io", "fio-u-", r"[A-Za-z0-9_=-]{64}"),
    TokenFormat("service_token", "Adobe client secret", "p8e-", r"[A-Za-z0-9]{32}"),
    TokenFormat("service_token", "Perplexity", "pplx-", r"[A-Za-z0-9]{48}"),
    TokenFormat("service_token", "Kolide", "k2sk_v1_", r"[A-Za-z0-9]{24,}"),
    # Onfido API tokens: ``api_live.`` or ``api_sandbox.``, a region for data outside the EU
    # (``api_live_us.``, ``api_live_ca.``), an 11-character id, ``.`` and a 32-character secret.
    *(
        TokenFormat("service_token", "Onfido", prefix, r"(?:_us|_ca)?\.[A-Za-z0-9_-]{11}\.[A-Za-z0-9_-]{32}")
        for prefix in ("api_live", "api_sandbox")
    ),
    TokenFormat("service_token", "1Password service account", "ops_eyJ", r"[A-Za-z0-9+/]{250,}={0,3}"),
    TokenFormat(
        "service_token",
        "1Password secret key",
        "A3-",
        r"[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}",
    ),
    # Commerce, payments and messaging.
    *(
        # 32 hex as Shopify documents them; apps and older stores have base62 ones up to 40.
        TokenFormat("service_token", "Shopify", prefix, r"[A-Za-z0-9]{32,40}")
        for prefix in ("shpat_", "shpca_", "shppa_", "shpss_")
    ),
    *(
        TokenFormat("service_token", "Shippo", prefix, r"[a-fA-F0-9]{40}")
        for prefix in ("shippo_live_", "shippo_test_")
    ),
    *(
        TokenFormat("service_token", "Duffel", prefix, r"[A-Za-z0-9_=-]{43}")
        for prefix in ("duffel_live_", "duffel_test_")
    ),
    *(TokenFormat("service_token", "EasyPost", prefix, r"[A-Za-z0-9]{54}") for prefix in ("EZAK", "EZTK")),
    *(
        TokenFormat("service_token", "Flutterwave", prefix, r"[a-hA-H0-9]{32}-X")
        for prefix in ("FLWSECK-", "FLWSECK_TEST-")
    ),
    TokenFormat("service_token", "Square access token", "sq0atp-", _B64URL + "{22,60}"),
    # Square's access tokens since 2019: ``EAAA`` and 60 characters of base64url.
    TokenFormat("service_token", "Square access token", "EAAA", _B64URL + "{60}"),
    TokenFormat("service_token", "Square OAuth secret", "sq0csp-", _B64URL + "{40,50}"),
    *(
        TokenFormat("service_token", "Facebook / Meta access token", prefix, r"[A-Za-z0-9]{100,}")
        for prefix in ("EAAM", "EAAC")
    ),
    *(
        TokenFormat("service_token", "Brevo (Sendinblue)", prefix, r"[a-f0-9]{64}-[A-Za-z0-9]{16}")
        for prefix in ("xkeysib-", "xsmtpsib-")
    ),
    *(
        TokenFormat("service_token", "42 intranet client secret", prefix, r"[a-f0-9]{64}")
        for prefix in ("s-s4t2ud-", "s-s4t2af-")
    ),
)


@dataclass(frozen=True)
class HashFormat:
    """A password hash as the scheme writes it: ``opening`` is the literal it starts with, in lowercase
    (`secrets` looks for it before trying ``pattern``, which starts there)."""

    scheme: str
    opening: tuple[str, ...]
    pattern: str


# The crypt alphabet (``./0-9A-Za-z``) and standard base64, as the schemes below write salts and hashes.
_CRYPT = r"[./A-Za-z0-9]"
_BASE64 = r"[A-Za-z0-9+/]"

# Password hashes in the formats that store them (crypt(5), passlib, Django, Werkzeug, LDAP, PostgreSQL):
# a hash is cracked offline at the speed of the attacker's hardware, so it is kept like the password.
# Each format has a scheme tag of its own (``$2b$``, ``$argon2id$``, ``pbkdf2_sha256$``) and a hash
# of a fixed length or alphabet after its salt, which bare hex digests (git SHAs, checksums) lack.
PASSWORD_HASH_FORMATS: tuple[HashFormat, ...] = (
    HashFormat("bcrypt", ("$2",), r"\$2[abxy]?\$\d\d\$" + _CRYPT + "{53}"),
    HashFormat("md5-crypt", ("$1$",), r"\$1\$" + _CRYPT + r"{0,8}\$" + _CRYPT + "{22}"),
    HashFormat("Apache MD5 (apr1)", ("$apr1$",), r"\$apr1\$" + _CRYPT + r"{0,8}\$" + _CRYPT + "{22}"),
    HashFormat("sha256-crypt", ("$5$",), r"\$5\$(?:rounds=\d+\$)?" + _CRYPT + r"{0,16}\$" + _CRYPT + "{43}"),
    HashFormat("sha512-crypt", ("$6$",), r"\$6\$(?:rounds=\d+\$)?" + _CRYPT + r"{0,16}\$" + _CRYPT + "{86}"),
    HashFormat(
        "yescrypt", ("$y$", "$gy$"), r"\$g?y\$" + _CRYPT + r"+\$" + _CRYPT + r"{0,86}\$" + _CRYPT + "{43}"
    ),
    HashFormat("scrypt (crypt)", ("$7$",), r"\$7\$" + _CRYPT + r"{11,}\$" + _CRYPT + "{43}"),
    # Cisco IOS type 8 (PBKDF2-SHA256) and type 9 (scrypt) secrets: a 14-character salt, 43 of hash.
    HashFormat("Cisco type 8/9", ("$8$", "$9$"), r"\$[89]\$" + _CRYPT + r"{14}\$" + _CRYPT + "{43}"),
    HashFormat("sha1-crypt", ("$sha1$",), r"\$sha1\$\d+\$" + _CRYPT + r"{0,64}\$" + _CRYPT + "{28}"),
    HashFormat(
        "Argon2",
        ("$argon2",),
        r"\$argon2(?:id|i|d)\$(?:v=\d+\$)?m=\d+,t=\d+,p=\d+\$" + _BASE64 + r"{8,}\$" + _BASE64 + "{16,}",
    ),
    HashFormat(
        "scrypt (passlib)",
        ("$scrypt$",),
        r"\$scrypt\$ln=\d+,r=\d+,p=\d+\$[A-Za-z0-9+/.]{8,}\$[A-Za-z0-9+/.]{16,}",
    ),
    HashFormat(
        "PBKDF2 (passlib)",
        ("$pbkdf2",),
        r"\$pbkdf2(?:-sha(?:256|512))?\$\d+\$" + _CRYPT + r"+\$" + _CRYPT + "{27,}",
    ),
    HashFormat(
        "PBKDF2 (Django)",
        ("pbkdf2_sha",),
        r"pbkdf2_sha(?:1|256)\$\d+\$[A-Za-z0-9]+\$" + _BASE64 + "{27,}={0,2}",
    ),
    HashFormat(
        "Werkzeug",
        ("pbkdf2:sha", "scrypt:"),
        r"(?:pbkdf2:sha(?:1|256|512)(?::\d+)?|scrypt:\d+:\d+:\d+)\$[A-Za-z0-9]{8,}\$[0-9a-f]{40,}",
    ),
    HashFormat(
        "LDAP userPassword",
        ("{ssha", "{sha", "{smd5", "{md5", "{pbkdf2"),
        r"\{(?i:ssha(?:256|384|512)?|sha(?:256|384|512)?|smd5|md5|pbkdf2(?:-sha\d+)?)\}"
        + _BASE64
        + "{20,}={0,2}",
    ),
    # Kerberos AS-REP and TGS-REP hashes (AS-REP roasting, Kerberoasting), as hashcat and the impacket
    # scripts write them: encrypted with a key derived from the account's password, so cracked
    # offline like any hash. ``$krb5asrep$23$[user@REALM:]<checksum>$<encrypted part>``,
    # ``$krb5tgs$23$*user$REALM$spn*$<checksum>$<encrypted part>``.
    HashFormat(
        "Kerberos AS-REP/TGS-REP",
        ("$krb5asrep$", "$krb5tgs$"),
        r"\$krb5(?:asrep|tgs)\$\d{1,2}\$(?:[^\s$:*]*[:*$]|\*[^\s*]*\*\$)??[0-9a-fA-F]{24,64}\$[0-9a-fA-F]{64,}",
    ),
    HashFormat(
        "PostgreSQL SCRAM verifier",
        ("scram-sha-",),
        r"(?i:scram-sha-256)\$\d+:" + _BASE64 + r"+={0,2}\$" + _BASE64 + r"+={0,2}:" + _BASE64 + "+={0,2}",
    ),
)
