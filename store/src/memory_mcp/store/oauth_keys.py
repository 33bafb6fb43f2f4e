"""The keys that sign OAuth access tokens: Ed25519, identified by their RFC 7638 thumbprint, rotated
with an overlap. From a folder of PEM files (a Kubernetes Secret) or, on a laptop, the database."""

from __future__ import annotations

import base64
import hashlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from sqlalchemy import text

from .audit import record
from .db import Database
from .errors import StoreError

ALGORITHM = "EdDSA"  # Ed25519: small keys, and a signature checks in tens of microseconds
# How old a pod's copy of the keys may be when it signs or verifies a token: a key retired with
# ``oauth keys retire`` is refused everywhere this long after (the target is 5 s).
RECHECK_S = 2.0
# A token naming a kid this process has not read yet (another pod made a key a moment ago) reads the
# keys again at once, but not more often than this: forged kids cannot turn into a read a request.
UNKNOWN_KID_RECHECK_S = 0.25


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# --- signing keys -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SigningKey:
    kid: str
    private: Ed25519PrivateKey
    public: Ed25519PublicKey
    created_at: datetime
    retired_at: datetime | None

    def public_jwk(self) -> dict[str, str]:
        raw = self.public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return {
            "kty": "OKP",
            "crv": "Ed25519",
            "x": b64(raw),
            "kid": self.kid,
            "alg": ALGORITHM,
            "use": "sig",
        }


def _kid(public: Ed25519PublicKey) -> str:
    """The RFC 7638 thumbprint of the public key: the same key has the same id on every pod."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    canonical = f'{{"crv":"Ed25519","kty":"OKP","x":"{b64(raw)}"}}'
    return b64(hashlib.sha256(canonical.encode()).digest())


def _load_pem(pem: bytes) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("an OAuth signing key must be an Ed25519 private key (PKCS#8 PEM)")
    return key


def _pem(key: Ed25519PrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def generate_pem() -> str:
    """A new Ed25519 private key as PKCS#8 PEM (for a Secret, or the database)."""
    return _pem(Ed25519PrivateKey.generate())


class SigningKeys:
    """The keys that sign access tokens (the newest) and verify them (every key not yet retired
    for longer than an access token lives: the overlap that lets a rotation pass unnoticed).

    Keys come from a folder of PEM files (a Kubernetes Secret; the name sorting last signs) when
    ``folder`` is set, else from the database, where the first pod to need one creates it. Kept in
    memory and read again when they are ``recheck_s`` old and a token is to be signed or checked:
    every pod signs with a rotated key and refuses a key retired at once (``retire_signing_key``)
    within ``recheck_s``, at the cost of one indexed read per interval; a token naming a ``kid`` it
    has not read yet (another pod's new key) makes it read again at once (at most every
    ``UNKNOWN_KID_RECHECK_S``).
    A retired key's overlap is kept by the clock on every check, not by the next read.
    """

    def __init__(self, folder: Path | None, overlap_s: int, recheck_s: float = RECHECK_S) -> None:
        self.folder = folder
        self.overlap_s = overlap_s
        self.recheck_s = recheck_s
        self._keys: dict[str, SigningKey] = {}
        self._signing: SigningKey | None = None
        self._loaded_at = float("-inf")

    def _stale(self) -> bool:
        return time.monotonic() - self._loaded_at >= self.recheck_s

    async def signing_key(self, db: Database) -> SigningKey:
        if self._signing is None or self._stale():
            await self._load(db, create=True)
        assert self._signing is not None
        return self._signing

    async def verification_key(self, db: Database, kid: str) -> SigningKey | None:
        """The key named ``kid`` while it may verify: live, or retired less than the overlap ago."""
        unknown = kid not in self._keys and time.monotonic() - self._loaded_at >= UNKNOWN_KID_RECHECK_S
        if self._stale() or unknown:
            await self._load(db, create=False)
        key = self._keys.get(kid)
        if key is None or key.retired_at is None:
            return key
        return key if (datetime.now(UTC) - key.retired_at).total_seconds() < self.overlap_s else None

    async def all_public(self, db: Database) -> list[dict[str, str]]:
        await self.signing_key(db)
        return [key.public_jwk() for key in self._keys.values()]

    async def _load(self, db: Database, create: bool) -> None:
        self._loaded_at = time.monotonic()
        loaded = self._from_folder() if self.folder is not None else await self._from_database(db, create)
        self._keys = {key.kid: key for key in loaded}
        live = [key for key in loaded if key.retired_at is None]
        self._signing = max(live, key=lambda key: key.created_at) if live else None
        if self._signing is None and create:
            raise StoreError("no OAuth signing key is available")

    def _from_folder(self) -> list[SigningKey]:
        assert self.folder is not None
        files = sorted(p for p in self.folder.iterdir() if p.suffix == ".pem" and p.is_file())
        out = []
        for order, path in enumerate(files):
            private = _load_pem(path.read_bytes())
            # The order of the names is the order of creation; the last one signs.
            created = datetime.fromtimestamp(order, UTC)
            out.append(SigningKey(_kid(private.public_key()), private, private.public_key(), created, None))
        return out

    async def _from_database(self, db: Database, create: bool) -> list[SigningKey]:
        rows = await _signing_rows(db, self.overlap_s)
        if create and not any(row.retired_at is None for row in rows):
            await add_signing_key(db)
            rows = await _signing_rows(db, self.overlap_s)
        out = []
        for row in rows:
            private = _load_pem(row.private_pem.encode())
            out.append(SigningKey(row.kid, private, private.public_key(), row.created_at, row.retired_at))
        return out


async def _signing_rows(db: Database, overlap_s: int) -> list[Any]:
    async with db.transaction() as conn:
        return list(
            await conn.execute(
                text(
                    "SELECT kid, private_pem, created_at, retired_at FROM oauth_signing_keys "
                    "WHERE retired_at IS NULL OR retired_at > now() - make_interval(secs => :overlap)"
                ),
                {"overlap": overlap_s},
            )
        )


async def add_signing_key(db: Database, retire_others: bool = False, actor: str = "system") -> str:
    """Store a new signing key (it signs from now on); with ``retire_others`` the older keys stop
    signing but keep verifying for the overlap. Returns the new key's id."""
    private = Ed25519PrivateKey.generate()
    kid = _kid(private.public_key())
    async with db.transaction() as conn:
        if retire_others:
            await conn.execute(
                text("UPDATE oauth_signing_keys SET retired_at = now() WHERE retired_at IS NULL")
            )
        await conn.execute(
            text("INSERT INTO oauth_signing_keys (kid, private_pem) VALUES (:kid, :pem)"),
            {"kid": kid, "pem": _pem(private)},
        )
        await record(conn, actor, "oauth.signing_key_added", "oauth_signing_key", kid)
    return kid


async def retire_signing_key(db: Database, kid: str, actor: str = "system") -> bool:
    """Delete the signing key ``kid`` at once, without an overlap (a key that leaked): the tokens it
    signed are refused on every pod within :data:`RECHECK_S`, and the next token is signed by
    another key (a new one when it was the only one). False when there is no such key."""
    async with db.transaction() as conn:
        gone = (
            await conn.execute(
                text("DELETE FROM oauth_signing_keys WHERE kid = :kid RETURNING kid"), {"kid": kid}
            )
        ).first()
        if gone is not None:
            await record(conn, actor, "oauth.signing_key_retired", "oauth_signing_key", kid)
    return gone is not None
