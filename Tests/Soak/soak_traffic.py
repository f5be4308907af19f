#!/usr/bin/env python3
"""Mixed traffic for Tests/Soak/soak.sh: notifications, REST reads and metering, paced at --rate
requests per second (0: as fast as --threads connections go, to measure capacity).

Prints, per phase (named offsets from --phases), the requests, statuses and p50/p99 latency, and
writes the UUID of every notification answered 200 to --accepted. Keep-alive connections, one
per thread; standard library only; secrets arrive in the environment.
"""
import argparse
import base64
import hashlib
import hmac
import http.client
import json
import os
import random
import threading
import time


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def user_token(secret, user):
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = b64url(json.dumps({"sub": user, "exp": int(time.time()) + 7200}).encode())
    signature = hmac.new(secret, (header + "." + claims).encode(), hashlib.sha256).digest()
    return header + "." + claims + "." + b64url(signature)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bodies", required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--rate", type=float, default=0)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--phases", default="run:0", help="name:offset_seconds,...")
    parser.add_argument("--accepted", default=os.devnull)
    args = parser.parse_args()

    secret = os.environ["SOAK_USER_SECRET"].encode()
    service = os.environ["SOAK_SERVICE_TOKEN"]
    bodies = [line.strip() for line in open(args.bodies) if line.strip()]
    phases = [(name, float(offset)) for name, offset in (p.split(":") for p in args.phases.split(","))]
    lock = threading.Lock()
    results = {name: {"latencies": [], "statuses": {}, "errors": 0} for name, _ in phases}
    accepted = []
    tokens = [user_token(secret, "soak-user-%d" % i) for i in range(50)]
    start = time.monotonic()
    interval = args.threads / args.rate if args.rate > 0 else 0

    def phase_at(elapsed):
        current = phases[0][0]
        for name, offset in phases:
            if elapsed >= offset:
                current = name
        return current

    def next_request(rng):
        kind = rng.random()
        if kind < 0.4:
            with lock:
                body = bodies.pop() if bodies else None
            if body:
                return "POST", "/api/v1/iap/apple/notifications/sandbox", {"Content-Type": "application/json"}, body, True
        if kind < 0.7:
            path = rng.choice(["/api/v1/subscriptions/current", "/api/v1/credits/balance", "/api/v1/credits/grants",
                               "/api/v1/subscriptions/products"])
            return "GET", path, {"Authorization": "Bearer " + rng.choice(tokens)}, None, False
        if kind < 0.9:
            body = json.dumps({"idempotencyKey": "soak-%d-%d" % (os.getpid(), rng.getrandbits(62)),
                               "userId": "soak-user-%d" % rng.randrange(50), "units": 1, "rate": "chat.message"})
            headers = {"Authorization": "Bearer " + service, "Content-Type": "application/json"}
            return "POST", "/api/v1/credits/usage", headers, body, False
        return ("GET", "/api/v1/credits/check?userId=soak-user-%d&units=1&rate=chat.message" % rng.randrange(50),
                {"Authorization": "Bearer " + service}, None, False)

    def worker(index):
        rng = random.Random(index)
        connection = None
        due = start + rng.random() * interval
        while True:
            now = time.monotonic()
            if now - start >= args.duration:
                return
            if interval:
                if due > now:
                    time.sleep(due - now)
                due += interval
            method, path, headers, body, notification = next_request(rng)
            sent = time.monotonic()
            phase = phase_at(sent - start)
            try:
                if connection is None:
                    connection = http.client.HTTPConnection("127.0.0.1", args.port, timeout=30)
                connection.request(method, path, body=body, headers=headers)
                response = connection.getresponse()
                payload = response.read()
                status = response.status
                if response.getheader("Connection", "").lower() == "close":
                    connection.close()
                    connection = None
            except (OSError, http.client.HTTPException):
                if connection is not None:
                    connection.close()
                connection = None
                with lock:
                    results[phase]["errors"] += 1
                continue
            latency = time.monotonic() - sent
            with lock:
                entry = results[phase]
                entry["latencies"].append(latency)
                entry["statuses"][status] = entry["statuses"].get(status, 0) + 1
                if notification and status == 200:
                    accepted.append(json.loads(payload)["notificationUUID"])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - start
    total = sum(len(r["latencies"]) for r in results.values())
    print("traffic: %d answered in %.0f s (%.0f/s), %d notifications accepted" % (total, elapsed, total / elapsed, len(accepted)))
    for name, _ in phases:
        entry = results[name]
        latencies = sorted(entry["latencies"])
        if not latencies:
            continue
        pick = lambda q: 1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))]
        print("phase %-16s requests %7d  p50 %7.1f ms  p99 %8.1f ms  connection errors %d  statuses %s" % (
            name, len(latencies), pick(0.5), pick(0.99), entry["errors"],
            " ".join("%d:%d" % kv for kv in sorted(entry["statuses"].items()))))
    with open(args.accepted, "w") as out:
        out.write("\n".join(accepted) + ("\n" if accepted else ""))


if __name__ == "__main__":
    main()
