#!/usr/bin/env bash
# The whole test suite on a fresh Debian/Ubuntu machine (as root): installs what is missing,
# starts PostgreSQL and the broker, builds everything, runs every test. Integration tests fail
# (never skip) when their services are missing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
command -v swift >/dev/null 2>&1 || export PATH="/opt/swift/usr/bin:$PATH"

bash "$LOCAL_DIR/install.sh"
bash "$LOCAL_DIR/start.sh" >/dev/null
# Tests that restart or kill a broker start private ones from the same binary.
export TANSU_BIN="$(tansu_bin)"
cd "$REPO_DIR"
log "building (debug, with tests)"
swift build --build-tests 2>&1 | quiet_build
log "running tests"
export SUBS_BIN_DIR="$(swift build --show-bin-path)"
swift test --skip-build "$@"
