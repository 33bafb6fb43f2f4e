"""API key material: random, shown once, stored as a SHA-256 hash with a lookup prefix."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

KEY_SCHEME = "mmk"
PREFIX_LEN = 10
SECRET_BYTES = 32


@dataclass(frozen=True)
class NewKey:
    """A freshly generated key: ``plaintext`` is shown once and never stored."""

    plaintext: str
    prefix: str
    hash: str


def generate_key() -> NewKey:
    """``mmk_<prefix>_<secret>``: the prefix finds the row, the hash of the whole key proves it."""
    prefix = secrets.token_hex(PREFIX_LEN // 2)
    secret = secrets.token_urlsafe(SECRET_BYTES)
    plaintext = f"{KEY_SCHEME}_{prefix}_{secret}"
    return NewKey(plaintext=plaintext, prefix=prefix, hash=hash_key(plaintext))


def hash_key(plaintext: str) -> str:
    # A fast hash is right here: keys carry 256 bits of entropy, so there is nothing to brute-force.
    return hashlib.sha256(plaintext.encode()).hexdigest()


def prefix_of(plaintext: str) -> str | None:
    """The lookup prefix of a presented key, or None when it is not shaped like one of ours."""
    parts = plaintext.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_SCHEME or len(parts[1]) != PREFIX_LEN or not parts[2]:
        return None
    return parts[1]


def matches(plaintext: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_key(plaintext), stored_hash)
