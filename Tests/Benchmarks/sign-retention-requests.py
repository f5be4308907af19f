#!/usr/bin/env python3
"""Get Retention Message request bodies for retention-messages.sh, signed ahead of time with the
demo signer's chain (subsctl demo-signer init) so the load measures the ingress, not the signing.

    sign-retention-requests.py SIGNER_DIR COUNT SUBSCRIBERS OUT

Body i asks about chain 3000000000000000 + i % (SUBSCRIBERS + SUBSCRIBERS / 10): most are the
seeded subscribers, a tenth chains we do not know; locales cycle through en-GB (the offer rule),
de-DE (a German message) and fr-FR (the catch-all), each with a new requestIdentifier.
"""
import base64
import json
import sys
import time
import uuid

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def main() -> None:
    signer_dir, count, subscribers, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    chain = []
    for name in ("leaf.pem", "intermediate.pem", "root.pem"):
        with open(f"{signer_dir}/{name}", "rb") as file:
            certificate = x509.load_pem_x509_certificate(file.read())
        chain.append(base64.b64encode(certificate.public_bytes(serialization.Encoding.DER)).decode())
    with open(f"{signer_dir}/leaf-key.pem", "rb") as file:
        key = serialization.load_pem_private_key(file.read(), password=None)
    header = b64url(json.dumps({"alg": "ES256", "x5c": chain}, separators=(",", ":")).encode())
    locales = ("en-GB", "de-DE", "fr-FR")
    chains = subscribers + max(1, subscribers // 10)
    now = int(time.time() * 1000)
    with open(out, "w") as file:
        for i in range(count):
            payload = {
                "originalTransactionId": str(3000000000000000 + i % chains),
                "appAppleId": 1234567890,
                "productId": "com.example.pro.monthly",
                "userLocale": locales[i % len(locales)],
                "requestIdentifier": str(uuid.uuid4()),
                "signedDate": now,
                "environment": "Sandbox",
            }
            signing_input = header + "." + b64url(json.dumps(payload, separators=(",", ":")).encode())
            r, s = decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
            jws = signing_input + "." + b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))
            file.write(json.dumps({"signedPayload": jws}) + "\n")


if __name__ == "__main__":
    main()
