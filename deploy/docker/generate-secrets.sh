#!/bin/sh
# The compose stack's `secrets` service: creates, once, what a first start needs and .env may
# leave out, in the `subs-secrets` volume (never in the image or the repository):
#   postgres_password  - $POSTGRES_PASSWORD when .env sets it, else random
#   generated.env      - PAYLOAD_ENCRYPTION_KEYS, CURSOR_SIGNING_KEY and, only while .env chooses no
#                        user token method (USER_TOKEN_JWKS_URL, USER_TOKEN_PUBLIC_KEY_PATH,
#                        USER_TOKEN_HS256_SECRETS), USER_TOKEN_HS256_SECRET; random; .env's own
#                        values win over them (see entrypoint.sh)
#   kafka_cluster_id   - the KRaft cluster id, random (not secret: readable by the broker's user)
# Existing files and lines are kept, so a re-created stack keeps reading what it stored before.
set -eu
dir="${SUBS_SECRETS_DIR:-/var/lib/subs/secrets}"
umask 077
mkdir -p "$dir"
random_base64() { head -c "$1" /dev/urandom | base64 | tr -d '\n'; }
if [ ! -s "$dir/postgres_password" ]; then
    printf '%s' "${POSTGRES_PASSWORD:-$(random_base64 24 | tr '+/' '-_')}" >"$dir/postgres_password.tmp"
    mv "$dir/postgres_password.tmp" "$dir/postgres_password"
    echo "created postgres_password"
fi
# Lines are added one by one, never replaced: a stack that first started with an identity
# provider and later drops it gets its generated user token secret then.
touch "$dir/generated.env"
added=""
add() {
    grep -q "^$1=" "$dir/generated.env" && return 0
    printf '%s=%s\n' "$1" "$2" >>"$dir/generated.env.tmp"
    added="$added $1"
}
cp "$dir/generated.env" "$dir/generated.env.tmp"
add PAYLOAD_ENCRYPTION_KEYS "k1:$(random_base64 32)"
add CURSOR_SIGNING_KEY "$(random_base64 32)"
# A stand-in for local use (`subsctl dev-token`) only: beside the method the operator chose it
# would be a second one, which the ingress refuses.
if [ -z "${USER_TOKEN_JWKS_URL:-}${USER_TOKEN_PUBLIC_KEY_PATH:-}${USER_TOKEN_HS256_SECRETS:-}" ]; then
    add USER_TOKEN_HS256_SECRET "$(random_base64 32)"
fi
if [ -n "$added" ]; then
    mv "$dir/generated.env.tmp" "$dir/generated.env"
    echo "generated.env: added$added"
else
    rm "$dir/generated.env.tmp"
fi
if [ ! -s "$dir/kafka_cluster_id" ]; then
    # KRaft wants 16 random bytes, base64url without padding (what kafka-storage.sh random-uuid prints).
    random_base64 16 | tr '+/' '-_' | tr -d '=' >"$dir/kafka_cluster_id"
    chmod 0644 "$dir/kafka_cluster_id"
    echo "created kafka_cluster_id"
fi
# The broker runs as another user: it may enter the folder (it reads only the cluster id).
chmod 0711 "$dir"
