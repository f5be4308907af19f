#!/usr/bin/env python3
"""Mutated HTTP requests against a live ingress on loopback (driven by Tests/Fuzz/ingress-fuzz.sh).

Every request goes on a connection of its own. One whose bytes are complete must end in an
answer or a close before the deadline: neither is a hung connection. One cut short on purpose
(a body shorter than announced, a head never finished) may rightly wait for the rest: it is
abandoned after a few seconds, and the server must stay unharmed. A status of 500 or more is a
failure (PostgreSQL and the broker are up during the run, so not even 503 is expected; 505 is
the right answer to an unknown HTTP version), and so is the ingress process dying. Genuinely signed notifications must still be answered 200.
An answer that closes the connection is read to the end: a second answer after it (a request
answered twice) is a failure, and so is an error answer without the JSON error body (what
libmicrohttpd refuses before any callback included: our build patches its bodies to that shape).
Bounded by --count and --seconds; the random seed is printed so a failing run can be replayed.
Standard library only. Secrets arrive in the environment, never on the command line or output.

--numbers fuzzes the numbers of the admin and metering APIs instead: well-formed, authorised
requests (credit adjustments, usage calls, balance checks, list limits) whose amounts, units and
limits are drawn from the ends of every range (0, 1, 2^63-1 and beyond, 1e308, negative zero,
decimals past six places, numbers as strings). Every answer must be below 500; the caller then
checks that the books still balance (one of these numbers crashed the ingress and every worker).
"""
import argparse
import base64
import hashlib
import hmac
import json
import os
import random
import re
import socket
import sys
import threading
import time

ROUTES = [
    ("POST", "/api/v1/iap/apple/notifications/sandbox"), ("POST", "/api/v1/iap/apple/notifications/production"),
    ("POST", "/api/v1/subscriptions/orders"), ("GET", "/api/v1/subscriptions/orders/PAY1"),
    ("POST", "/api/v1/subscriptions/orders/PAY1/cancel"), ("POST", "/api/v1/subscriptions/orders/PAY1/apple-transaction"),
    ("POST", "/api/v1/subscriptions/apple-transactions/observed"), ("GET", "/api/v1/subscriptions/current"),
    ("GET", "/api/v1/subscriptions/products"), ("PUT", "/api/v1/subscriptions/consumption-consent"),
    ("GET", "/api/v1/credits/balance"), ("GET", "/api/v1/credits/grants?limit=5"), ("GET", "/api/v1/credits/daily-bills"),
    ("POST", "/api/v1/credits/usage"), ("GET", "/api/v1/credits/check?userId=u1&units=1&rate=chat.message"),
    ("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"), ("GET", "/openapi.json"),
]
METHODS = ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "TRACE", "CONNECT", "G\x00T", "get", "X" * 300, ""]


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Fuzzer:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.lock = threading.Lock()
        self.stats = {"sent": 0, "hung": 0, "abandoned": 0, "server_errors": 0, "genuine_refused": 0,
                      "closed_without_answer": 0, "answered_twice": 0}
        self.statuses = {}
        self.not_json = {}
        self.examples = []
        self.bodies = [line.strip() for line in open(args.bodies) if line.strip()]
        self.genuine_left = list(self.bodies[args.genuine_from:])
        self.secret = os.environ["FUZZ_USER_SECRET"].encode()
        self.service_token = os.environ["FUZZ_SERVICE_TOKEN"]

    # --- building blocks -------------------------------------------------------------------

    def token(self, rng):
        header = {"alg": "HS256", "typ": "JWT"}
        claims = {"sub": rng.choice(["u1", "fuzz-user", "", "a" * 200, 42]), "exp": int(time.time()) + 3600}
        kind = rng.randrange(8)
        if kind == 1:
            claims["nbf"] = rng.choice(["soon", None, [], 1e300, -1])
        if kind == 2:
            header["alg"] = rng.choice(["none", "RS256", "ES256", "hs256", ""])
        header_b = json.dumps(header).encode()
        claims_b = json.dumps(claims).encode()
        if kind == 3:  # a duplicated claim
            claims_b = claims_b[:-1] + b', "sub": "someone-else"}'
        signing = b64url(header_b) + "." + b64url(claims_b)
        signature = b64url(hmac.new(self.secret, signing.encode(), hashlib.sha256).digest())
        if kind == 4:
            signature = signature[::-1]
        token = signing + "." + signature
        if kind == 5:
            token = self.mutate_text(rng, token)
        if kind == 6:
            return self.service_token
        return token

    def mutate_text(self, rng, text):
        data = bytearray(text.encode("utf-8", "surrogatepass"))
        for _ in range(rng.randint(1, 4)):
            if not data:
                break
            op = rng.randrange(6)
            i = rng.randrange(len(data))
            if op == 0:
                data[i] = rng.randrange(256)
            elif op == 1:
                del data[i:i + rng.randint(1, 16)]
            elif op == 2:
                data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
            elif op == 3:
                data[i:i] = data[i:i + rng.randint(1, 64)]
            elif op == 4:
                data = data[:i]
            else:
                data[i:i] = rng.choice([b"\x00", b"\\u0000", b"\r\n", b"%00", b"..", b"\xff\xfe", b'"', b"{", b"}"])
        return data.decode("latin-1")

    def notification_body(self, rng):
        body = rng.choice(self.bodies[: self.args.genuine_from])
        kind = rng.randrange(6)
        if kind == 0:
            return body
        if kind == 1:
            return self.mutate_text(rng, body)
        payload = json.loads(body)["signedPayload"]
        parts = payload.split(".")
        if kind == 2:  # one segment mutated
            index = rng.randrange(3)
            parts[index] = self.mutate_text(rng, parts[index])
        elif kind == 3:  # segments swapped or dropped
            rng.shuffle(parts)
            parts = parts[: rng.randint(1, 4)]
        elif kind == 4:  # a duplicated member
            return '{"signedPayload": %s, "signedPayload": "x"}' % json.dumps(payload)
        else:
            return json.dumps({"signedPayload": rng.choice([None, 1, [], {}, "", "a" * 70000])})
        return json.dumps({"signedPayload": ".".join(parts)})

    def json_body(self, rng):
        candidates = [
            {"productId": "com.example.monthly", "requestId": "r-%d" % rng.randrange(1000)},
            {"consumptionData": rng.choice(["GRANTED", "DENIED", "UNKNOWN", "MAYBE", None, 1])},
            {"idempotencyKey": "k-%d" % rng.randrange(1000), "userId": "u1", "units": rng.choice([1, -1, 10**30, 0.5, "1"]),
             "rate": "chat.message"},
            {"signedTransaction": "a.b.c"},
        ]
        text = json.dumps(rng.choice(candidates))
        kind = rng.randrange(5)
        if kind == 0:
            return text
        if kind == 1:
            return self.mutate_text(rng, text)
        if kind == 2:
            return text[:-1] + ', "consumptionData": "DENIED", "requestId": "dup"}'
        if kind == 3:
            depth = rng.choice([10, 40, 1000])
            return "[" * depth + "]" * depth
        return rng.choice(["", "null", "[]", '"x"', "{", "\x00", "1e999999", '{"a":' * 50])

    def path(self, rng, path):
        kind = rng.randrange(8)
        if kind < 3:
            return path
        if kind == 3:
            return path.replace("/", "//", rng.randint(1, 3))
        if kind == 4:
            return "".join("%%%02X" % ord(c) if c.isalpha() and rng.random() < 0.3 else c for c in path)
        if kind == 5:
            return path + rng.choice(["/", "/.", "/..", "/../../metrics", "%2F..%2Fmetrics", "?limit=1&limit=2", "?a=%00",
                                      "#frag", " HTTP/1.1", "/" + "a" * 5000])
        if kind == 6:
            return rng.choice(["*", "http://127.0.0.1/healthz", "", "/\x00", "/%", "/%zz", "/\xff", "/metrics", "//metrics",
                               "/%6Detrics", "/./metrics"])
        return self.mutate_text(rng, path)

    # --- numbers (--numbers) ---------------------------------------------------------------

    EXTREME_INTEGERS = [0, 1, 2, -1, 2**31 - 1, 2**31, 2**53, 2**53 + 1, 2**63 - 1, 2**63, -2**63, -2**63 - 1, 2**64,
                        10**12, 10**15, 10**18, 10**30, 10**400]
    EXTREME_TEXT = ["9223372036854.775807", "-9223372036854.775808", "9223372036854.775808", "0.000001", "0.0000001",
                    "-0", "0", "1.", ".5", "1e3", "1E-7", "NaN", "Infinity", "-Infinity", "+1", "00001", "1_000",
                    " 1", "1 ", "0x10", "1000000000", "999999999999.999999", "-999999999999.999999", ""]

    def number(self, rng):
        """An amount, units or limit from the ends of the ranges, as JSON would carry it."""
        kind = rng.randrange(6)
        if kind == 0:
            return rng.choice(self.EXTREME_INTEGERS) * rng.choice([1, -1])
        if kind == 1:
            return rng.choice(self.EXTREME_TEXT)
        if kind == 2:
            return rng.choice([1e308, -1e308, 5e-324, 0.1, 0.5, 1.0000005, 9.223372036854776e18, -0.0, 1.5e12])
        if kind == 3:  # random digits, maybe with a fraction, as text
            digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 40)))
            if rng.random() < 0.5:
                digits += "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 10)))
            return rng.choice(["", "-"]) + digits
        if kind == 4:  # a plausible amount near a limit
            return rng.choice([10**7, 10**9, 10**12]) + rng.choice([-1, 0, 1])
        return rng.randint(-10**6, 10**6)

    def build_numbers(self, rng):
        """Raw bytes of one numbers request and the port it goes to."""
        user = rng.choice(self.args.users.split(","))
        kind = rng.randrange(5)
        if kind <= 1:
            port, token = self.args.admin_port, os.environ["FUZZ_ADMIN_TOKEN"]
            body = {"pool": rng.choice(["PERMANENT", "WELCOME", "SUBSCRIPTION"]), "amount": self.number(rng),
                    "number": "n-%d" % rng.randrange(10**9), "reason": "numbers fuzz"}
            method, path = "POST", "/admin/v1/users/%s/credits/adjustments" % user
        elif kind == 2:
            port, token = self.args.port, self.service_token
            body = {"idempotencyKey": "k-%d" % rng.randrange(10**9), "userId": user, "units": self.number(rng),
                    "rate": rng.choice(["fuzz.max", "fuzz.tiny", "fuzz.mid"])}
            method, path = "POST", "/api/v1/credits/usage"
        elif kind == 3:
            port, token = self.args.port, self.service_token
            units = self.number(rng)
            body = None
            method, path = "GET", "/api/v1/credits/check?userId=%s&units=%s&rate=%s" % (
                user, str(units).replace(" ", "%20"), rng.choice(["fuzz.max", "fuzz.tiny"]))
        else:
            port, token = self.args.admin_port, os.environ["FUZZ_ADMIN_TOKEN"]
            body = None
            method, path = "GET", rng.choice(["/admin/v1/events?limit=%s", "/admin/v1/lookup?q=%s"]) % str(
                self.number(rng)).replace(" ", "%20")
        raw_body = b""
        if body is not None:
            # Integers beyond 64 bits and 1e308 are valid JSON: json.dumps writes them as they are.
            raw_body = json.dumps(body).encode()
        head = "%s %s HTTP/1.1\r\nHost: fuzz\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n" \
               "Content-Length: %d\r\n\r\n" % (method, path, token, len(raw_body))
        return head.encode() + raw_body, port

    # --- one request --------------------------------------------------------------------

    def build(self, rng):
        """Raw bytes of one request, whether it must get 200, and whether its bytes are complete."""
        if self.genuine_left and rng.random() < self.args.genuine_share:
            with self.lock:
                body = self.genuine_left.pop() if self.genuine_left else None
            if body:
                head = ("POST /api/v1/iap/apple/notifications/sandbox HTTP/1.1\r\nHost: fuzz\r\n"
                        "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body.encode()))
                return head.encode() + body.encode(), True, True
        method, path = rng.choice(ROUTES)
        if rng.random() < 0.1:
            method = rng.choice(METHODS)
        path = self.path(rng, path)
        if "notifications" in path:
            body = self.notification_body(rng)
        elif method in ("POST", "PUT"):
            body = self.json_body(rng)
        else:
            body = "" if rng.random() < 0.8 else self.json_body(rng)
        headers = [("Host", "fuzz")]
        if rng.random() < 0.9:
            headers.append(("Content-Type", rng.choice(["application/json", "application/json; charset=utf-8", "text/plain",
                                                        "APPLICATION/JSON", "", "application/json\x00"])))
        if rng.random() < 0.7:
            headers.append(("Authorization", rng.choice(["Bearer ", "bearer ", "Basic ", ""]) + self.token(rng)))
        if rng.random() < 0.2:
            headers.append(("X-Forwarded-For", rng.choice(["203.0.113.%d" % rng.randrange(256), "junk", "1.1.1.1, 2.2.2.2", ""])))
        if rng.random() < 0.2:
            headers.append(("X-Request-Id", self.mutate_text(rng, "req-%d" % rng.randrange(10**6))))
        if rng.random() < 0.2:
            headers.append(("Idempotency-Key", self.mutate_text(rng, "key-%d" % rng.randrange(10**6))))
        raw_body = body.encode("latin-1", "replace") if isinstance(body, str) else body
        version = "HTTP/1.1" if rng.random() < 0.95 else rng.choice(["HTTP/1.0", "HTTP/2.0", "HTTP/1.1x", "", "HTTP/9"])
        framing = rng.randrange(14)
        complete = True
        eol = "\r\n"
        if framing < 8:
            headers.append(("Content-Length", str(len(raw_body))))
            payload = raw_body
        elif framing == 8:  # chunked, maybe malformed
            chunk_size = rng.choice([len(raw_body), len(raw_body) + 5, 0])
            complete = chunk_size == len(raw_body)
            payload = b"%x\r\n" % chunk_size + raw_body + b"\r\n0\r\n\r\n"
            headers.append(("Transfer-Encoding", rng.choice(["chunked", "Chunked", "gzip, chunked", "chunked, chunked"])))
            if rng.random() < 0.3:
                headers.append(("Content-Length", str(len(payload))))
        elif framing == 9:  # lengths that disagree
            headers.append(("Content-Length", str(len(raw_body))))
            headers.append(("Content-Length", str(len(raw_body) + rng.randint(1, 50))))
            payload = raw_body
        elif framing == 10:
            headers.append(("Content-Length", rng.choice(["-1", "abc", "1e3", " 5", "99999999999999999999", ""])))
            payload = raw_body
            complete = False  # a lenient reading may wait for bytes that never come
        elif framing == 11:  # shorter than announced: the server must not wait for ever
            headers.append(("Content-Length", str(len(raw_body) + rng.randint(1, 1000))))
            payload = raw_body
            complete = False
        elif framing == 12:  # odd line ends, folding, NUL, oversized or nameless fields
            eol = rng.choice(["\n", "\r\n", "\r"])
            complete = eol != "\r"
            headers.append(rng.choice([("X-Folded", "a\r\n b"), ("X-Nul", "a\x00b"), ("X-Big", "b" * rng.choice([100, 20000, 70000])),
                                       ("", "nameless"), ("Bad Name", "x"), ("X-Ctl", "\x01\x02")]))
            headers.append(("Content-Length", str(len(raw_body))))
            payload = raw_body
        else:  # the head cut short
            payload = b""
            complete = False
        if rng.random() < 0.05:
            headers = [h for h in headers if h[0] != "Host"]
        head = "%s %s %s%s" % (method, path, version, eol) + "".join("%s: %s%s" % (n, v, eol) for n, v in headers) + eol
        raw = head.encode("latin-1", "replace") + payload
        if framing == 13:
            raw = raw[: rng.randrange(max(1, len(raw) - 4))]
        return raw, False, complete

    @staticmethod
    def json_error(head, body):
        """Whether an error answer carries the product's JSON error body."""
        if b"application/json" not in head.lower():
            return False
        try:
            return "code" in json.loads(body)
        except ValueError:
            return False

    def exchange(self, raw, complete, port=None):
        """(outcome, status, details): 'answered', 'closed' or 'hung'; for an answer, whether an
        error came in JSON and, for one closing the connection, whether a second answer followed."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(self.args.deadline if complete else self.args.abandon_after)
        try:
            sock.connect(("127.0.0.1", port or self.args.port))
            try:
                sock.sendall(raw)
            except OSError:
                pass  # the server may close first (an early refusal): read what it said
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 65536:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            if not data.startswith(b"HTTP/1."):
                return "closed", None, {}
            try:
                status = int(data.split(b" ", 2)[1])
            except (IndexError, ValueError):
                return "closed", None, {}
            head, _, rest = data.partition(b"\r\n\r\n")
            details = {}
            closing = b"\nconnection: close" in head.lower()
            if status >= 400 or closing:
                bodiless = raw.startswith(b"HEAD ")
                length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                length = int(length.group(1)) if length and not bodiless else 0
                try:
                    # The server closes after this answer: anything else it sends comes at once.
                    while closing and len(rest) < length + 65536:
                        chunk = sock.recv(65536)
                        if not chunk:
                            break
                        rest += chunk
                    while len(rest) < length:
                        chunk = sock.recv(65536)
                        if not chunk:
                            break
                        rest += chunk
                except OSError:
                    pass
                details["json"] = status < 400 or bodiless or self.json_error(head, rest[:length])
                # After an answer that keeps the connection, more answers are for bytes sent past
                # the announced body (a pipelined request): only one after a close is a repeat.
                details["twice"] = closing and rest[length:].startswith(b"HTTP/1.")
            return "answered", status, details
        except socket.timeout:
            return ("hung" if complete else "abandoned"), None, {}
        except ConnectionError:
            return "closed", None, {}
        finally:
            sock.close()

    def worker(self, index, deadline, quota):
        rng = random.Random(self.args.seed * 1000 + index)
        for _ in range(quota):
            if time.monotonic() > deadline:
                return
            if self.args.numbers:
                raw, port = self.build_numbers(rng)
                genuine, complete = False, True
            else:
                raw, genuine, complete = self.build(rng)
                port = None
            outcome, status, details = self.exchange(raw, complete, port)
            with self.lock:
                self.stats["sent"] += 1
                if outcome == "hung":
                    self.stats["hung"] += 1
                    self.record("hung", raw)
                elif outcome == "abandoned":
                    self.stats["abandoned"] += 1
                elif outcome == "closed":
                    self.stats["closed_without_answer"] += 1
                else:
                    self.statuses[status] = self.statuses.get(status, 0) + 1
                    if not details.get("json", True):
                        self.not_json[status] = self.not_json.get(status, 0) + 1
                        self.record("status %d without the JSON error body" % status, raw)
                    if details.get("twice"):
                        self.stats["answered_twice"] += 1
                        self.record("answered twice", raw)
                    if status >= 500 and status != 505:
                        self.stats["server_errors"] += 1
                        self.record("status %d" % status, raw)
                if genuine and status != 200:
                    self.stats["genuine_refused"] += 1
                    self.record("genuine answered %s" % status, raw)

    def record(self, what, raw):
        if len(self.examples) < 10:
            self.examples.append("%s: %r" % (what, raw[:300]))

    def run(self):
        deadline = time.monotonic() + self.args.seconds
        threads = [
            threading.Thread(target=self.worker, args=(i, deadline, self.args.count // self.args.threads))
            for i in range(self.args.threads)
        ]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        print("fuzz: seed=%d requests=%d in %.1f s (%.0f/s)" % (self.args.seed, self.stats["sent"], elapsed,
                                                             self.stats["sent"] / max(elapsed, 0.001)))
        print("fuzz: statuses %s" % " ".join("%d:%d" % kv for kv in sorted(self.statuses.items())))
        print("fuzz: closed without an answer %d, cut short and abandoned %d, hung %d, 5xx %d, genuine notifications not 200 %d" % (
            self.stats["closed_without_answer"], self.stats["abandoned"], self.stats["hung"], self.stats["server_errors"],
            self.stats["genuine_refused"]))
        print("fuzz: answered twice %d; error answers without a JSON body, by status: %s" % (
            self.stats["answered_twice"], " ".join("%d:%d" % kv for kv in sorted(self.not_json.items())) or "none"))
        for example in self.examples:
            print("fuzz: example " + example)
        return (self.stats["hung"] == 0 and self.stats["server_errors"] == 0 and self.stats["genuine_refused"] == 0
                and self.stats["answered_twice"] == 0 and not self.not_json)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bodies", required=True, help="signed notification bodies, one JSON per line")
    parser.add_argument("--genuine-from", type=int, required=True, help="lines from here on are sent unmodified, once each")
    parser.add_argument("--genuine-share", type=float, default=0.02)
    parser.add_argument("--count", type=int, default=200000)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--deadline", type=float, default=12, help="seconds a complete request may go unanswered")
    parser.add_argument("--abandon-after", type=float, default=0.2, help="seconds before a request cut short is dropped")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--numbers", action="store_true", help="fuzz the numbers of the admin and metering APIs")
    parser.add_argument("--admin-port", type=int, help="the admin listener (--numbers)")
    parser.add_argument("--users", default="fuzz-1", help="comma-separated existing user ids (--numbers)")
    args = parser.parse_args()
    sys.exit(0 if Fuzzer(args).run() else 1)


if __name__ == "__main__":
    main()
