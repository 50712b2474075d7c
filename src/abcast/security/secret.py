"""A group's shared secret, and the keys derived from it.

Rules: a secret is bytes or str (UTF-8), at least MIN_SECRET_BYTES long; `load_secret`
normalises it once and every other function takes the normalised bytes. HKDF does not
stretch a password: anyone who records one link handshake (or asks a member for one)
can test guesses offline (180,000 a second in pure Python on one core), so a secret
must be random, not chosen (docs/operations.md); one shorter than ADVISED_SECRET_BYTES
gets one WARNING per process. Keys are never the secret itself: each use derives its
own with HKDF-SHA256 (RFC 5869), the `info` naming the use (link MAC, AEAD, registry
proof), so a key leaked from one use says nothing about another. `proof` is the one
keyed digest the registry's challenges use. Comparisons of MACs go through
`hmac.compare_digest` only (`same`), and so do the registry's checks of node-id tokens
(`same_text`).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import Final

from abcast.errors import ConfigError

MIN_SECRET_BYTES: Final = 8
MAX_SECRET_BYTES: Final = 4096
#: below this a secret draws a warning (32 random bytes, base64: 44 characters, is the advice)
ADVISED_SECRET_BYTES: Final = 16

log: Final = logging.getLogger(__name__)
_warned: Final[dict[str, bool]] = {"short": False}  # one warning per process
DIGEST: Final = hashlib.sha256
DIGEST_BYTES: Final = 32


def load_secret(secret: bytes | str | None) -> bytes | None:
    """The secret as bytes (None stays None); ConfigError if it cannot be one."""
    if secret is None:
        return None
    if isinstance(secret, str):
        secret = secret.encode()
    if not isinstance(secret, bytes | bytearray):
        raise ConfigError(f"a group secret is bytes or str, got {type(secret).__name__}")
    if not MIN_SECRET_BYTES <= len(secret) <= MAX_SECRET_BYTES:
        raise ConfigError(
            f"a group secret must be {MIN_SECRET_BYTES}..{MAX_SECRET_BYTES} bytes, "
            f"got {len(secret)}"
        )
    if len(secret) < ADVISED_SECRET_BYTES and not _warned["short"]:
        _warned["short"] = True
        log.warning("a group secret of %d bytes can be guessed offline from one recorded "
                    "handshake: use a random one of 32 bytes (openssl rand -base64 32)",
                    len(secret))
    return bytes(secret)


def hkdf(secret: bytes, *, salt: bytes, info: bytes, length: int = DIGEST_BYTES) -> bytes:
    """HKDF-SHA256 (RFC 5869): extract with `salt`, expand with `info` to `length` bytes."""
    if not 1 <= length <= 255 * DIGEST_BYTES:
        raise ConfigError(f"hkdf length must be in 1..{255 * DIGEST_BYTES}, got {length}")
    prk = hmac.new(salt or bytes(DIGEST_BYTES), secret, DIGEST).digest()
    out = b""
    block = b""
    counter = 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter]), DIGEST).digest()
        out += block
        counter += 1
    return out[:length]


def session_key(secret: bytes, *, session: bytes, label: bytes) -> bytes:
    """The key of one sender session of a transport without a handshake (zmq://): the
    session id (unique per connection) salts it, so counters may restart per session
    without a nonce ever repeating under one key."""
    return hkdf(secret, salt=session, info=b"abcast session " + label)


def proof(secret: bytes, label: bytes, *parts: bytes) -> bytes:
    """HMAC-SHA256 under a key derived for `label`, over length-prefixed `parts` (so no
    two different part lists digest the same bytes)."""
    key = hkdf(secret, salt=b"abcast", info=b"abcast proof " + label)
    mac = hmac.new(key, digestmod=DIGEST)
    for part in parts:
        mac.update(len(part).to_bytes(4, "big"))
        mac.update(part)
    return mac.digest()


def same(a: bytes, b: bytes) -> bool:
    """Constant-time equality of two MACs."""
    return hmac.compare_digest(a, b)


def same_text(a: str, b: str) -> bool:
    """Constant-time equality of two secret strings (the registry's node-id tokens),
    compared as UTF-8: compare_digest refuses a str beyond ASCII, and a token may be any
    string."""
    return same(a.encode(), b.encode())
