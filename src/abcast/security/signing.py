"""Proofs of the group secret for the registry: an Ed25519 key pair derived from the
secret, so the registry keeps only a public key (a verifier) and can check that a
request comes from a holder of the secret without ever being able to make one itself.

Rules: the private key is HKDF(secret, info = "abcast registry signing key"), the
verifier its raw 32-byte public key; a proof is the Ed25519 signature of
`context | nonce | body` where `nonce` is the registry connection's fresh challenge
(so a proof seen on one connection is worth nothing on another) and `body` the
request's encoding with its proof field empty (its request id included: the registry
accepts only rising ids on a connection, so a proof is not worth a second request on
its own one either; abcast.registry.messages.signed_body). `verify` is True or False,
nothing else.
"""

from __future__ import annotations

from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from abcast.security.secret import hkdf

VERIFIER_BYTES: Final = 32
PROOF_BYTES: Final = 64
_CONTEXT: Final = b"abcast registry request\x00"


class Signer:
    """The holder's side: `verifier` to publish, `prove(nonce, body)` per request."""

    __slots__ = ("_key", "verifier")

    def __init__(self, secret: bytes) -> None:
        seed = hkdf(secret, salt=b"abcast", info=b"abcast registry signing key")
        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        self.verifier: bytes = self._key.public_key().public_bytes(Encoding.Raw,
                                                                   PublicFormat.Raw)

    def prove(self, nonce: bytes, body: bytes) -> bytes:
        return self._key.sign(_CONTEXT + nonce + body)


def verify(verifier: bytes, nonce: bytes, body: bytes, proof: bytes) -> bool:
    """Whether `proof` is the holder's signature of this request on this connection."""
    if len(verifier) != VERIFIER_BYTES or len(proof) != PROOF_BYTES:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(verifier).verify(proof, _CONTEXT + nonce + body)
    except (InvalidSignature, ValueError):
        return False
    return True
