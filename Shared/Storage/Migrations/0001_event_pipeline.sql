-- The event pipeline: every inbound Apple fact is stored before it is acknowledged, then
-- published through an outbox, then claimed by exactly one worker at a time under a lease.

CREATE TABLE apple_notification_event (
    id                       bigserial PRIMARY KEY,
    notification_uuid        text NOT NULL,
    notification_type        text NOT NULL,
    subtype                  text,
    environment              text NOT NULL,
    signed_date              timestamptz,
    transaction_id           text,
    original_transaction_id  text,
    routing_key              text NOT NULL,
    process_status           text NOT NULL DEFAULT 'RECEIVED'
        CHECK (process_status IN ('RECEIVED', 'PROCESSING', 'RETRY_WAIT', 'SUCCEEDED', 'DEAD')),
    retry_count              integer NOT NULL DEFAULT 0,
    next_retry_at            timestamptz,
    lease_owner              text,
    lease_expires_at         timestamptz,
    error_code               text,
    error_message            text,
    -- AES-256-GCM ciphertext of the signed payload, and the id of the key that sealed it.
    signed_payload           bytea,
    payload_key_id           text,
    trace_id                 text,
    -- When the sweeper last re-published this event, so one sweep does not flood the topic.
    republished_at           timestamptz,
    received_at              timestamptz NOT NULL DEFAULT now(),
    processed_at             timestamptz,
    updated_at               timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT apple_notification_event_uuid_key UNIQUE (notification_uuid)
);
CREATE INDEX apple_notification_event_due_idx ON apple_notification_event (next_retry_at)
    WHERE process_status = 'RETRY_WAIT';
CREATE INDEX apple_notification_event_lease_idx ON apple_notification_event (lease_expires_at)
    WHERE process_status = 'PROCESSING';
CREATE INDEX apple_notification_event_received_idx ON apple_notification_event (received_at)
    WHERE process_status = 'RECEIVED';
CREATE INDEX apple_notification_event_otid_idx ON apple_notification_event (original_transaction_id);

-- Rows committed with their event and deleted once the broker acknowledged the message; what
-- stays here after a crash or a broker outage is re-published by the relay.
CREATE TABLE event_outbox (
    id            bigserial PRIMARY KEY,
    event_kind    text NOT NULL,
    event_id      bigint NOT NULL,
    topic         text NOT NULL,
    routing_key   text NOT NULL,
    trace_id      text,
    attempts      integer NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT now(),
    next_attempt_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX event_outbox_due_idx ON event_outbox (next_attempt_at);

-- One row per event whose processing committed: the proof that its effects were applied once.
CREATE TABLE processed_event (
    event_kind    text NOT NULL,
    event_id      bigint NOT NULL,
    worker_id     text NOT NULL,
    attempt       integer NOT NULL,
    processed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_kind, event_id)
);
