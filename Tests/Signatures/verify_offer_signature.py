"""Checks an offer signature the way StoreKit's server side would read it, with Python's
`cryptography` rather than the service's code: the header and claims Apple's documentation
("Generating JWS to sign App Store requests") and Apple's App Store Server Library
(`jws_signature_creator.py`: PromotionalOfferV2SignatureCreator,
IntroductoryOfferEligibilitySignatureCreator) write, and the ES256 signature under the public half
of the App Store key.

usage: verify_offer_signature.py P8_KEY_FILE JWS EXPECTED_JSON
EXPECTED_JSON: {"kid", "iss", "bid", "aud", "claims": {feature claims, exactly}}
Prints "valid" and exits 0, or prints why not and exits 1.
"""

import json
import re
import sys
import time

from cryptography.hazmat.primitives import serialization

from es256 import b64url, signature_problem

# What Apple's library adds to every feature's claims (JWSSignatureCreator._create_signature).
COMMON_CLAIMS = {"bid", "iss", "aud", "iat", "nonce"}
# The feature claims Apple's library writes per audience; transactionId is optional for
# promotional offers only.
FEATURE_CLAIMS = {
    "promotional-offer": ({"productId", "offerIdentifier"}, {"transactionId"}),
    "introductory-offer-eligibility": ({"productId", "allowIntroductoryOffer", "transactionId"}, set()),
}
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def verify(key_pem: bytes, jws: str, expected: dict) -> str | None:
    """None when the JWS is what Apple expects, else the reason it is not."""
    parts = jws.split(".")
    if len(parts) != 3 or any(c in jws for c in "=+/"):
        return "not a compact JWS (three base64url parts without padding)"
    header_b64, claims_b64, signature_b64 = parts
    header = json.loads(b64url(header_b64))
    if header != {"alg": "ES256", "kid": expected["kid"], "typ": "JWT"}:
        return f"header is not Apple's: {header}"
    public_key = serialization.load_pem_private_key(key_pem, password=None).public_key()
    problem = signature_problem(public_key, header_b64, claims_b64, signature_b64)
    if problem:
        return problem
    claims = json.loads(b64url(claims_b64))
    aud = claims.get("aud")
    if aud != expected["aud"] or aud not in FEATURE_CLAIMS:
        return f"aud {aud} is not {expected['aud']}"
    required, optional = FEATURE_CLAIMS[aud]
    names = set(claims)
    if not (COMMON_CLAIMS | required) <= names or not names <= COMMON_CLAIMS | required | optional:
        return f"claims {sorted(names)} are not Apple's for {aud}"
    if claims["iss"] != expected["iss"] or claims["bid"] != expected["bid"]:
        return "iss or bid is not the configured key's"
    if not isinstance(claims["iat"], int) or abs(time.time() - claims["iat"]) > 300:
        return "iat is not a recent time in whole seconds"
    if not isinstance(claims["nonce"], str) or not UUID.match(claims["nonce"]):
        return "nonce is not a lowercase UUID"
    feature = {name: value for name, value in claims.items() if name not in COMMON_CLAIMS}
    if feature != expected["claims"]:
        return f"feature claims {feature} are not {expected['claims']}"
    return None


def main() -> int:
    key_path, jws, expected = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    with open(key_path, "rb") as f:
        key_pem = f.read()
    problem = verify(key_pem, jws, expected)
    print(problem or "valid")
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main())
