"""Password hashing (argon2id) and random secrets (tokens, session ids) stored as SHA-256.

Random 256-bit secrets need no slow hash: SHA-256 of a secret that cannot be guessed is as good as
argon2 for them, and lets every request look the token up by its hash in one indexed query.
"""

from __future__ import annotations

import hashlib
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

_hasher = PasswordHasher()

TOKEN_PREFIX = "cp_"
MIN_PASSWORD_LENGTH = 8


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    if not password_hash:
        return False
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def new_secret(prefix: str = TOKEN_PREFIX) -> str:
    return prefix + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_password() -> str:
    return secrets.token_urlsafe(15)
