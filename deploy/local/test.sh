#!/usr/bin/env bash
# The whole test suite on a fresh Debian/Ubuntu machine (as root): installs what is missing,
# checks the deployment files statically, starts PostgreSQL and the broker, builds everything,
# runs every test. Integration tests fail
# (never skip) when their services are missing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
command -v swift >/dev/null 2>&1 || export PATH="/opt/swift/usr/bin:$PATH"

bash "$LOCAL_DIR/install.sh"
log "checking the deployment files (compose, alert rules, Kubernetes manifests)"
"$VENV_DIR/bin/python" "$REPO_DIR/deploy/check-deployment.py" \
    --promtool "$TOOLS_DIR/promtool" --kubernetes-validate "$VENV_DIR/bin/kubernetes-validate"
bash "$LOCAL_DIR/start.sh" >/dev/null
bash "$LOCAL_DIR/drop-test-databases.sh"
# Tests that restart or kill a broker start private ones from the same binary.
export TANSU_BIN="$(tansu_bin)"
cd "$REPO_DIR"
log "checking the format (swift format lint --strict, configured in .swift-format)"
git ls-files -z '*.swift' | xargs -0 swift format lint --strict --parallel
log "building (debug, with tests)"
swift build --build-tests 2>&1 | quiet_build
log "running tests"
export SUBS_BIN_DIR="$(swift build --show-bin-path)"
export LOG_LEVEL="${LOG_LEVEL:-warning}"
# `swift test` can exit 0 when the test process dies (seen with SIGKILL), and a hung test would
# hold CI until its deadline: bound the run, and require the runner's own summary line.
# Three phases: the module and integration suites (in parallel), then the Kafka suites, whose
# consumer groups lose their sessions (and so re-deliver) when a parallel phase starves their
# heartbeats on two cores, then the end-to-end suites, which start service processes of their own
# and would starve timing-sensitive broker and HTTP tests if everything ran at once.
run_phase() {  # name, swift test arguments...
    local name="$1"; shift
    local result="$LOG_DIR/test-output-$name.log" status=0
    timeout --kill-after=30 "${SUBS_TEST_TIMEOUT:-1500}" swift test --skip-build "$@" 2>&1 | tee "$result" || status=$?
    if [ "$status" -ne 0 ]; then log "$name tests failed (exit $status)"; exit "$status"; fi
    if ! grep -Eq 'Test run with [0-9]+ tests? (in [0-9]+ suites? )?passed' "$result"; then
        log "the $name test run ended without its summary line: treating it as a failure"
        exit 1
    fi
}
if [ "$#" -gt 0 ]; then
    run_phase selected "$@"
else
    run_phase modules --skip EndToEndTests --skip KafkaTests
    run_phase kafka --filter KafkaTests
    # Each end-to-end test starts processes of its own (ingress, workers, brokers, databases): all
    # 110 at once on two cores starved the timing-bound ones, so they run a bounded number at a time.
    SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH="${SUBS_END_TO_END_WIDTH:-8}" \
        run_phase end-to-end --filter EndToEndTests
    log "fuzzing a live ingress (short mode: Tests/Fuzz/ingress-fuzz.sh --short)"
    bash "$REPO_DIR/Tests/Fuzz/ingress-fuzz.sh" --short
fi
