#!/usr/bin/env bash
# Drops the databases that earlier test runs made (the tests close theirs but do not drop them:
# DROP DATABASE waits for an immediate checkpoint, up to a minute each on a loaded two-core machine,
# while drops issued together share one). A database whose creating test process still runs is
# kept. The test command runs this first; run it yourself after `swift test` runs of your own.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

# TestEnvironment.uniqueName: prefix, creating process id, 8 hex digits.
names=$(psql "$DATABASE_URL" -qAtc "SELECT datname FROM pg_database WHERE datname ~ '^[a-z0-9]+_[0-9]+_[0-9a-f]{8}$'")
stale=()
for name in $names; do
    pid=${name#*_}
    kill -0 "${pid%_*}" 2>/dev/null || stale+=("$name")
done
[ "${#stale[@]}" -gt 0 ] || exit 0
log "dropping ${#stale[@]} databases of earlier test runs"
# Best effort: an autovacuum worker visiting a database makes FORCE fail with 42501; the next run
# tries again.
printf '%s\n' "${stale[@]}" | xargs -P 16 -I '{}' psql "$DATABASE_URL" -qc 'DROP DATABASE IF EXISTS {} WITH (FORCE)' 2>/dev/null || true
