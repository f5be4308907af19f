-- Webhooks: the endpoints operators register for the outbound events, and one delivery per
-- (endpoint, event). The delivery service writes a PENDING row per matching endpoint when it reads
-- an event from OUTBOUND_EVENT_TOPIC (unique: reading it again adds nothing), then sends, retries
-- and gives up (DEAD) from this table, so a slow or dead endpoint holds only its own rows.
CREATE TABLE webhook_endpoint (
    id                          text PRIMARY KEY,
    url                         text NOT NULL,
    -- NULL: every type (environment); otherwise only those listed.
    event_types                 text[],
    environments                text[],
    description                 text,
    -- The signing secret, sealed with PAYLOAD_ENCRYPTION_KEYS (AES-256-GCM, bound to the endpoint
    -- id): a copy of this table signs nothing.
    secret_key_id               text NOT NULL,
    secret_sealed               bytea NOT NULL,
    -- The secret a rotation replaced; it still signs beside the new one until it expires.
    previous_secret_key_id      text,
    previous_secret_sealed      bytea,
    previous_secret_expires_at  timestamptz,
    created_at                  timestamptz NOT NULL DEFAULT now(),
    -- Deleted endpoints keep their rows (the deliveries' history) but get nothing new.
    deleted_at                  timestamptz
);

CREATE TABLE webhook_delivery (
    seq               bigserial PRIMARY KEY,
    endpoint_id       text NOT NULL REFERENCES webhook_endpoint (id),
    -- The outbound event's id (`evt_…`), sent as webhook-id on every attempt.
    event_id          text NOT NULL,
    type              text NOT NULL,
    -- The event as read from the topic: every attempt sends these bytes.
    payload           bytea NOT NULL,
    status            text NOT NULL DEFAULT 'PENDING'
                      CHECK (status IN ('PENDING', 'RETRYING', 'DELIVERED', 'DEAD')),
    attempts          integer NOT NULL DEFAULT 0,
    last_status_code  integer,
    last_error        text,
    next_attempt_at   timestamptz NOT NULL DEFAULT now(),
    -- The sender working on it; another takes it over once the lease has run out.
    lease_owner       text,
    lease_expires_at  timestamptz,
    -- When the event was first read from the topic (delivery lag is measured from it).
    created_at        timestamptz NOT NULL DEFAULT now(),
    delivered_at      timestamptz,
    CONSTRAINT webhook_delivery_endpoint_event_key UNIQUE (endpoint_id, event_id)
);
-- The senders' claims: an endpoint's due rows in order, and its rows in flight.
CREATE INDEX webhook_delivery_due_idx ON webhook_delivery (endpoint_id, next_attempt_at)
    WHERE status IN ('PENDING', 'RETRYING');
CREATE INDEX webhook_delivery_leased_idx ON webhook_delivery (endpoint_id, lease_expires_at)
    WHERE status IN ('PENDING', 'RETRYING') AND lease_expires_at IS NOT NULL;
-- The admin list: an endpoint's deliveries, newest first, by status.
CREATE INDEX webhook_delivery_endpoint_idx ON webhook_delivery (endpoint_id, seq DESC);
