#!/usr/bin/env python3
"""Summarises the plans auto_explain logged (JSON format) during scale-run.sh.

usage: explain-summary.py SERVER_LOG_SLICE DATABASE_URL

Groups the sampled statements by text, prints each with how often it was sampled, who ran it
(application_name, from the log line prefix scale-run.sh sets) and its plan in one line, and
calls out every sequential scan of a large table (over 100,000 rows by the statistics).
"""

import json
import re
import subprocess
import sys
from collections import defaultdict

LARGE_ROWS = 100_000
PREFIX = re.compile(r"^\S+ \S+ \S+ \[\d+\] (?P<app>\S*) ")


def entries(path):
    """(application_name, plan document) per logged plan; continuation lines start with a tab."""
    current, app = None, None
    with open(path, errors="replace") as log:
        for line in log:
            if line.startswith("\t"):
                if current is not None:
                    current.append(line)
                continue
            if current is not None:
                yield app, "".join(current)
            current = None
            if "duration:" in line and "plan:" in line:
                match = PREFIX.match(line)
                app = match.group("app") if match else "?"
                current = [line.split("plan:", 1)[1]]
    if current is not None:
        yield app, "".join(current)


def nodes(plan):
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def describe(node):
    text = node["Node Type"]
    if "Index Name" in node:
        text += " using " + node["Index Name"]
    if "Relation Name" in node:
        text += " on " + node["Relation Name"]
    return text


def main():
    log, url = sys.argv[1], sys.argv[2]
    sizes = subprocess.run(
        ["psql", url, "-qAt", "-F", " ", "-c",
         "SELECT relname, reltuples::bigint FROM pg_class WHERE relkind = 'r' AND reltuples > %d" % LARGE_ROWS],
        check=True, capture_output=True, text=True).stdout.split("\n")
    large = {name: int(rows) for name, rows in (line.split(" ") for line in sizes if line)}
    groups = defaultdict(lambda: {"count": 0, "apps": set(), "plan": None, "large_scans": set()})
    unreadable = 0
    for app, document in entries(log):
        try:
            explained = json.loads(document)
        except json.JSONDecodeError:
            unreadable += 1
            continue
        text = " ".join(explained.get("Query Text", "").split())
        group = groups[text]
        group["count"] += 1
        group["apps"].add(app)
        plan = explained["Plan"]
        group["plan"] = " > ".join(describe(node) for node in nodes(plan))
        for node in nodes(plan):
            if node["Node Type"] == "Seq Scan" and node.get("Relation Name") in large:
                group["large_scans"].add("%s (%d rows)" % (node["Relation Name"], large[node["Relation Name"]]))
    total = sum(group["count"] for group in groups.values())
    print("%d plans sampled, %d distinct statements, %d unreadable; large tables: %d" % (
        total, len(groups), unreadable, len(large)))
    flagged = []
    for text, group in sorted(groups.items(), key=lambda item: -item[1]["count"]):
        apps = ",".join(sorted(group["apps"]))
        print("%6d  [%s] %s" % (group["count"], apps, text[:150]))
        print("        plan: %s" % group["plan"][:300])
        if group["large_scans"]:
            flagged.append((apps, text, group["large_scans"]))
            print("        SEQUENTIAL SCAN OF A LARGE TABLE: %s" % ", ".join(sorted(group["large_scans"])))
    print("statements with a sequential scan of a large table: %d" % len(flagged))
    for apps, text, scans in flagged:
        print("  [%s] %s: %s" % (apps, text[:120], ", ".join(sorted(scans))))


if __name__ == "__main__":
    main()
