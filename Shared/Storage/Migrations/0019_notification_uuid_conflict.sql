-- A notification UUID that arrives again with other signed content. Apple never reuses a UUID, so
-- a reuse is a fault or a forgery worth an operator's look: the first stored notification stays,
-- the sender still gets 200 (it would only retry), and the other content is recorded here.
--
-- Notifications now keep the SHA-256 of their signed content (the JWS signing input, so a
-- re-encoded signature is the same content) in payload_hash; rows stored before have none and
-- are never reported as conflicting.
ALTER TABLE inbound_event DROP CONSTRAINT inbound_event_notification_check;
ALTER TABLE inbound_event
    ADD CONSTRAINT inbound_event_notification_check CHECK (
        kind <> 'notification'
        OR (notification_uuid IS NOT NULL AND notification_type IS NOT NULL
            AND submission_kind IS NULL AND user_id IS NULL AND order_no IS NULL)) NOT VALID;
ALTER TABLE inbound_event VALIDATE CONSTRAINT inbound_event_notification_check;

CREATE TABLE notification_uuid_conflict (
    id bigserial PRIMARY KEY,
    notification_uuid text NOT NULL,
    -- The stored (first) notification and the hash of its content.
    event_id bigint NOT NULL,
    stored_payload_hash text NOT NULL,
    -- What came later under the same UUID (its payload is not kept: it was never accepted).
    received_payload_hash text NOT NULL,
    notification_type text NOT NULL,
    subtype text,
    signed_date timestamptz,
    trace_id text,
    received_at timestamptz NOT NULL DEFAULT now(),
    -- One row per distinct content: a sender repeating the same variant adds nothing.
    UNIQUE (notification_uuid, received_payload_hash)
);
