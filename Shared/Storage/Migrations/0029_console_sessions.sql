-- The support console's sessions. The browser's cookie holds a random id of which only the
-- SHA-256 digest is kept here, so a copy of this table opens nothing. A session names the admin
-- credential that signed in by a digest of its name and token: the ingress refuses the session as
-- soon as that credential has left ADMIN_TOKENS, and takes the operator's name and role from its
-- configuration, never from this row. Sign-out deletes the row; expired rows go at the next
-- sign-in. Its times come from the ingress's clock, which also judges them.
CREATE TABLE console_session (
    id_digest          bytea PRIMARY KEY CHECK (octet_length(id_digest) = 32),
    credential_digest  bytea NOT NULL CHECK (octet_length(credential_digest) = 32),
    -- The token every form of the session carries (CSRF); random, not derived from a key.
    csrf_token         text NOT NULL,
    created_at         timestamptz NOT NULL,
    last_seen_at       timestamptz NOT NULL
);
