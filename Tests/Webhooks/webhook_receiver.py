"""A webhook receiver for the tests: checks every request's signature with the Standard Webhooks
reference implementation (the `standardwebhooks` package), not with our code, and prints one JSON
line per request.

    webhook_receiver.py SECRETS_FILE

SECRETS_FILE maps a path to {label: secret}; it is read again at every request, so a test can add
a rotated secret. The answer depends on the path: /fail always 500; /flaky/N 500 for the first N
requests of each webhook-id, then 204; anything else 204. Prints `listening PORT` first. Each
line carries the body as received (`body`, decoded as UTF-8), for the forwarding's byte checks.
"""
import json
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook

SECRETS_FILE = sys.argv[1]
seen = Counter()
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {k: v for k, v in self.headers.items()}
        webhook_id = self.headers.get("webhook-id", "")
        with open(SECRETS_FILE) as f:
            secrets = json.load(f).get(self.path, {})
        verified = {}
        for label, secret in secrets.items():
            try:
                Webhook(secret).verify(body, headers)
                verified[label] = True
            except Exception:
                verified[label] = False
        with lock:
            seen[(self.path, webhook_id)] += 1
            count = seen[(self.path, webhook_id)]
        status = 204
        if self.path == "/fail":
            status = 500
        elif self.path.startswith("/flaky/") and count <= int(self.path.rsplit("/", 1)[1]):
            status = 500
        record = {
            "path": self.path, "id": webhook_id, "attempt": count, "status": status, "verified": verified,
            "signatures": len(self.headers.get("webhook-signature", "").split()),
            "type": json.loads(body or b"{}").get("type"),
            "body": body.decode("utf-8", "replace"),
        }
        # One write under the lock: print() writes the line and its newline separately, and two
        # handler threads interleaving them lost both lines.
        with lock:
            sys.stdout.write(json.dumps(record) + "\n")
            sys.stdout.flush()
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()
