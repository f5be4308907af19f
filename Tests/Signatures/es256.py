"""What the signature checkers share: base64url without padding, and an ES256 JWS signature
(raw r||s, RFC 7518) checked with Python's `cryptography`."""

import base64

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature


def b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def signature_problem(public_key: ec.EllipticCurvePublicKey, header_b64: str, claims_b64: str, signature_b64: str) -> str | None:
    """None when the signature of `header.claims` verifies, else why not."""
    raw = b64url(signature_b64)
    if len(raw) != 64:
        return "signature is not 64 bytes (r||s)"
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    try:
        public_key.verify(der, f"{header_b64}.{claims_b64}".encode("ascii"), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return "signature does not verify"
    return None
