#!/bin/sh
# The compose stack's `secrets` service: creates, once, what a first start needs and .env may
# leave out, in the `subs-secrets` volume (never in the image or the repository):
#   postgres_password  - $POSTGRES_PASSWORD when .env sets it, else random
#   generated.env      - PAYLOAD_ENCRYPTION_KEYS, CURSOR_SIGNING_KEY, USER_TOKEN_HS256_SECRET,
#                        random; .env's own values win over them (see entrypoint.sh)
#   kafka_cluster_id   - the KRaft cluster id, random (not secret: readable by the broker's user)
# Existing files are kept, so a re-created stack keeps reading what it stored before.
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
if [ ! -s "$dir/generated.env" ]; then
    {
        echo "PAYLOAD_ENCRYPTION_KEYS=k1:$(random_base64 32)"
        echo "CURSOR_SIGNING_KEY=$(random_base64 32)"
        echo "USER_TOKEN_HS256_SECRET=$(random_base64 32)"
    } >"$dir/generated.env.tmp"
    mv "$dir/generated.env.tmp" "$dir/generated.env"
    echo "created generated.env"
fi
if [ ! -s "$dir/kafka_cluster_id" ]; then
    # KRaft wants 16 random bytes, base64url without padding (what kafka-storage.sh random-uuid prints).
    random_base64 16 | tr '+/' '-_' | tr -d '=' >"$dir/kafka_cluster_id"
    chmod 0644 "$dir/kafka_cluster_id"
    echo "created kafka_cluster_id"
fi
# The broker runs as another user: it may enter the folder (it reads only the cluster id).
chmod 0711 "$dir"
