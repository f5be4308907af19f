-- One table for every inbound event, whatever its kind: the lifecycle (status, retries, lease,
-- error, republishing) is declared once and one statement serves every kind, and events share
-- one id space. A notification keeps its id; client submissions are renumbered after every id the
-- sequence handed out, and every row that names a submission by (kind, id) follows.
--
-- The notification table becomes the event table in place (renames and nullable columns cost no
-- rewrite), so only the submissions are copied. An envelope already on the topic that names a
-- submission by its old id finds no submission there (claims check the kind) and is acknowledged;
-- the sweeper publishes the renumbered row when it is due.

ALTER TABLE apple_notification_event RENAME TO inbound_event;
ALTER SEQUENCE apple_notification_event_id_seq RENAME TO inbound_event_id_seq;
ALTER INDEX apple_notification_event_pkey RENAME TO inbound_event_pkey;
ALTER TABLE inbound_event RENAME CONSTRAINT apple_notification_event_uuid_key TO inbound_event_notification_uuid_key;
ALTER TABLE inbound_event RENAME CONSTRAINT apple_notification_event_process_status_check TO inbound_event_process_status_check;
ALTER INDEX apple_notification_event_due_idx RENAME TO inbound_event_due_idx;
ALTER INDEX apple_notification_event_lease_idx RENAME TO inbound_event_lease_idx;
ALTER INDEX apple_notification_event_received_idx RENAME TO inbound_event_received_idx;
ALTER INDEX apple_notification_event_otid_idx RENAME TO inbound_event_otid_idx;
ALTER INDEX apple_notification_event_dead_idx RENAME TO inbound_event_dead_idx;

-- Kind-specific columns are nullable, each kind's CHECK says which it has. The UUID stays unique
-- (NULLs are distinct, so submissions never collide on it).
ALTER TABLE inbound_event
    ADD COLUMN kind text NOT NULL DEFAULT 'notification',
    ADD COLUMN submission_kind text,
    ADD COLUMN user_id text,
    ADD COLUMN order_no text,
    ADD COLUMN payload_hash text,
    ALTER COLUMN notification_uuid DROP NOT NULL,
    ALTER COLUMN notification_type DROP NOT NULL;
ALTER TABLE inbound_event ALTER COLUMN kind DROP DEFAULT;
ALTER TABLE inbound_event
    ADD CONSTRAINT inbound_event_kind_check CHECK (kind IN ('notification', 'submission')),
    -- An App Store Server Notification V2 (the webhook, a history recovery, a re-query's answer).
    ADD CONSTRAINT inbound_event_notification_check CHECK (
        kind <> 'notification'
        OR (notification_uuid IS NOT NULL AND notification_type IS NOT NULL
            AND submission_kind IS NULL AND user_id IS NULL AND order_no IS NULL AND payload_hash IS NULL)),
    -- A signed transaction a client uploaded for an order (CLIENT) or observed (OBSERVED).
    ADD CONSTRAINT inbound_event_submission_check CHECK (
        kind <> 'submission'
        OR (submission_kind IN ('CLIENT', 'OBSERVED') AND user_id IS NOT NULL AND transaction_id IS NOT NULL
            AND original_transaction_id IS NOT NULL AND payload_hash IS NOT NULL
            AND notification_uuid IS NULL AND notification_type IS NULL AND subtype IS NULL AND signed_date IS NULL));

-- New ids above both every id the sequence gave and every old submission id, so no update below
-- ever meets a row it has not moved yet under a unique key.
CREATE TEMPORARY TABLE submission_renumbered (old_id bigint PRIMARY KEY, new_id bigint NOT NULL);
DO $$
DECLARE
    base bigint := greatest(nextval('inbound_event_id_seq'), (SELECT coalesce(max(id), 0) FROM transaction_submission));
BEGIN
    INSERT INTO submission_renumbered (old_id, new_id)
    SELECT id, base + row_number() OVER (ORDER BY id) FROM transaction_submission;
    PERFORM setval('inbound_event_id_seq', base + (SELECT count(*) FROM submission_renumbered));
END;
$$;

INSERT INTO inbound_event (
    id, kind, submission_kind, user_id, order_no, environment, transaction_id, original_transaction_id, payload_hash,
    routing_key, process_status, retry_count, next_retry_at, lease_owner, lease_expires_at, error_code, error_message,
    signed_payload, payload_key_id, trace_id, republished_at, received_at, processed_at, updated_at)
SELECT r.new_id, 'submission', s.submission_kind, s.user_id, s.order_no, s.environment, s.transaction_id,
       s.original_transaction_id, s.payload_hash, s.routing_key, s.process_status, s.retry_count, s.next_retry_at,
       s.lease_owner, s.lease_expires_at, s.error_code, s.error_message, s.signed_payload, s.payload_key_id, s.trace_id,
       s.republished_at, s.received_at, s.processed_at, s.updated_at
  FROM transaction_submission s JOIN submission_renumbered r ON r.old_id = s.id;

-- Every row that names an event by (kind, id).
UPDATE event_outbox o SET event_id = r.new_id
  FROM submission_renumbered r WHERE o.event_kind = 'submission' AND o.event_id = r.old_id;
UPDATE processed_event p SET event_id = r.new_id
  FROM submission_renumbered r WHERE p.event_kind = 'submission' AND p.event_id = r.old_id;
UPDATE status_history h SET event_id = r.new_id
  FROM submission_renumbered r WHERE h.event_kind = 'submission' AND h.event_id = r.old_id;
UPDATE unmatched_fact u SET event_id = r.new_id
  FROM submission_renumbered r WHERE u.event_kind = 'submission' AND u.event_id = r.old_id;
DROP TABLE submission_renumbered;
DROP TABLE transaction_submission;

-- The same JWS uploaded again (for the same order, or observed again) is the same submission.
CREATE UNIQUE INDEX inbound_event_submission_key
    ON inbound_event (submission_kind, user_id, coalesce(order_no, ''), payload_hash) WHERE kind = 'submission';

-- See 0004: one statement now that there is one table.
CREATE OR REPLACE FUNCTION replay_dead_events(p_error_code text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    replayed integer;
BEGIN
    UPDATE inbound_event
       SET process_status = 'RECEIVED', retry_count = 0, next_retry_at = NULL, error_code = NULL,
           error_message = NULL, republished_at = NULL, updated_at = now()
     WHERE process_status = 'DEAD' AND error_code = p_error_code;
    GET DIAGNOSTICS replayed = ROW_COUNT;
    UPDATE unmatched_fact SET replayed_at = now(), updated_at = now()
     WHERE reason = p_error_code AND replayed_at IS NULL;
    RETURN replayed;
END;
$$;
