#!/bin/sh
# Entry point of the image: fills in what the compose stack's `secrets` service generated
# (generate-secrets.sh) for every variable the environment leaves empty, then runs the command.
# Outside compose (Kubernetes, a plain `docker run`) the folder is absent and nothing changes.
# The generated user token secret is used only while the environment chooses no other method
# (a JWK Set, a public key, named secrets): the ingress accepts one method, and a secret nobody
# asked for must not open the API beside the identity provider's keys. A setting given as a file
# (`NAME_FILE`, read by the services themselves) is left alone: setting both is refused.
set -eu
dir="${SUBS_SECRETS_DIR:-/var/lib/subs/secrets}"
user_token_method="${USER_TOKEN_JWKS_URL:-}${USER_TOKEN_PUBLIC_KEY_PATH:-}${USER_TOKEN_HS256_SECRETS:-}${USER_TOKEN_HS256_SECRETS_FILE:-}"
if [ -r "$dir/generated.env" ]; then
    while IFS= read -r line; do
        name="${line%%=*}" value="${line#*=}"
        case "$name" in PAYLOAD_ENCRYPTION_KEYS | CURSOR_SIGNING_KEY | USER_TOKEN_HS256_SECRET) ;; *) continue ;; esac
        if [ "$name" = USER_TOKEN_HS256_SECRET ] && [ -n "$user_token_method" ]; then continue; fi
        eval "current=\${$name:-}\${${name}_FILE:-}"
        [ -n "$current" ] || export "$name=$value"
    done <"$dir/generated.env"
fi
if [ -z "${DATABASE_URL:-}${DATABASE_URL_FILE:-}" ] && [ -r "$dir/postgres_password" ]; then
    # URL-safe by construction when generated; a password from .env must be URL-safe too.
    DATABASE_URL="postgresql://${POSTGRES_USER:-subs}:$(cat "$dir/postgres_password")@${POSTGRES_HOST:-postgres}:5432/${POSTGRES_DB:-subs}"
    export DATABASE_URL
fi
exec "$@"
