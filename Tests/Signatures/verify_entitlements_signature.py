"""Checks a signed entitlements answer the way an app (or its back end) would, with Python's
`cryptography` rather than the service's own code: the test of the signature is independent of
what made it, and the steps are the ones openapi.json describes for app developers.

usage: verify_entitlements_signature.py JWK_FILE BODY_FILE SIGNATURE NONCE USER_ID [MAX_AGE_SECONDS]
Prints "valid" and exits 0, or prints why not and exits 1.
"""

import hashlib
import json
import sys
import time

from cryptography.hazmat.primitives.asymmetric import ec

from es256 import b64url, signature_problem


def verify(jwk: dict, jws: str, body: bytes, nonce: str, user_id: str, max_age: int) -> str | None:
    """None when the answer is ours and fresh, else the reason it is not."""
    parts = jws.split(".")
    if len(parts) != 3:
        return "not a compact JWS"
    header_b64, claims_b64, signature_b64 = parts
    header = json.loads(b64url(header_b64))
    if header.get("alg") != "ES256" or header.get("kid") != jwk.get("kid"):
        return "header names another algorithm or key"
    if jwk.get("kty") != "EC" or jwk.get("crv") != "P-256":
        return "not a P-256 key"
    key = ec.EllipticCurvePublicNumbers(
        int.from_bytes(b64url(jwk["x"]), "big"), int.from_bytes(b64url(jwk["y"]), "big"), ec.SECP256R1()
    ).public_key()
    problem = signature_problem(key, header_b64, claims_b64, signature_b64)
    if problem:
        return problem
    claims = json.loads(b64url(claims_b64))
    if claims.get("nonce") != nonce:
        return "nonce is not the one sent (a replayed answer)"
    if claims.get("userId") != user_id:
        return "answer is for another user"
    if claims.get("bodySha256") != hashlib.sha256(body).hexdigest():
        return "body is not the one signed"
    if abs(time.time() - claims.get("iat", 0)) > max_age:
        return "answer is too old"
    return None


def main() -> int:
    jwk_path, body_path, jws, nonce, user_id = sys.argv[1:6]
    max_age = int(sys.argv[6]) if len(sys.argv) > 6 else 300
    with open(jwk_path, "rb") as f:
        jwk = json.load(f)
    with open(body_path, "rb") as f:
        body = f.read()
    problem = verify(jwk, jws, body, nonce, user_id, max_age)
    print(problem or "valid")
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main())
