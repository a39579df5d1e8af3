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
MIN_DISTINCT_CHARACTERS = 4
# the passwords tried first by anyone guessing (lower case; a password is compared in lower case)
COMMON_PASSWORDS = frozenset(
    (
        "password",
        "password1",
        "password123",
        "passw0rd",
        "p@ssw0rd",
        "12345678",
        "123456789",
        "1234567890",
        "87654321",
        "11111111",
        "00000000",
        "qwertyui",
        "qwertyuiop",
        "qwerty123",
        "asdfghjk",
        "azertyui",
        "abcdefgh",
        "abcd1234",
        "abc12345",
        "iloveyou",
        "letmein1",
        "welcome1",
        "welcome123",
        "admin123",
        "administrator",
        "changeme",
        "changeme1",
        "trustno1",
        "football",
        "baseball",
        "sunshine",
        "princess",
        "superman",
        "starwars",
        "whatever",
        "collapipe",
    )
)


def password_problem(password: str, username: str) -> str | None:
    """Why ``password`` is too easy to guess for ``username`` (None: it is not)."""
    lowered = password.lower()
    if (len(username) >= 3 and username.lower() in lowered) or lowered in username.lower():
        return "contains the user name; choose one that does not"
    if lowered in COMMON_PASSWORDS:
        return "is one of the most common passwords; choose another"
    if len(set(lowered)) < MIN_DISTINCT_CHARACTERS:
        return f"uses fewer than {MIN_DISTINCT_CHARACTERS} different characters; choose a less repetitive one"
    return None


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    """Whether ``password`` matches. Without a hash (no such user, or a deactivated one) the password
    is checked against a stand-in hash all the same, so the answer takes as long either way and its
    timing does not tell which usernames exist."""
    try:
        return _hasher.verify(password_hash or _stand_in_hash(), password) and bool(password_hash)
    except (VerificationError, InvalidHashError):
        return False


_stand_in: tuple[PasswordHasher, str] | None = None


def _stand_in_hash() -> str:
    """A hash of a random password with the hasher's current parameters (made once per hasher)."""
    global _stand_in
    if _stand_in is None or _stand_in[0] is not _hasher:
        _stand_in = (_hasher, _hasher.hash(secrets.token_urlsafe(16)))
    return _stand_in[1]


def new_secret(prefix: str = TOKEN_PREFIX) -> str:
    return prefix + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_password() -> str:
    return secrets.token_urlsafe(15)
