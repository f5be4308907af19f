-- Years of events: `inbound_event` becomes partitioned by month of received_at, so retention works
-- on whole months (payloads redacted, old partitions detached) and no index grows forever. The
-- worker's retention job (EventRetentionStore) creates partitions ahead and redacts and detaches
-- old ones; this migration moves the existing rows over in one step.
--
-- A unique key of a partitioned table must contain the partition key, so the deduplication keys
-- (a notification's UUID, a submission's signed content) move to `inbound_event_key`, a narrow
-- unpartitioned table written in the same statement as the event: an event row exists exactly when
-- its key row does, and the key row's unique indexes keep intake exactly-once across months. It
-- also carries received_at, so an event found by its key is read from its own partition only.
--
-- No foreign key names an event: the outbox, processed_event, status_history, unmatched_fact,
-- notification_uuid_conflict and subscription_import name events by id alone, and ids are kept.

ALTER TABLE inbound_event RENAME TO inbound_event_unpartitioned;
ALTER INDEX inbound_event_pkey RENAME TO inbound_event_unpartitioned_pkey;
ALTER SEQUENCE inbound_event_id_seq OWNED BY NONE;

CREATE TABLE inbound_event (
    id                       bigint NOT NULL,
    kind                     text NOT NULL CONSTRAINT inbound_event_kind_check CHECK (kind IN ('notification', 'submission')),
    notification_uuid        text,
    notification_type        text,
    subtype                  text,
    submission_kind          text,
    user_id                  text,
    order_no                 text,
    payload_hash             text,
    environment              text NOT NULL,
    signed_date              timestamptz,
    transaction_id           text,
    original_transaction_id  text,
    routing_key              text NOT NULL,
    process_status           text NOT NULL DEFAULT 'RECEIVED' CONSTRAINT inbound_event_process_status_check
        CHECK (process_status IN ('RECEIVED', 'PROCESSING', 'RETRY_WAIT', 'SUCCEEDED', 'DEAD')),
    retry_count              integer NOT NULL DEFAULT 0,
    next_retry_at            timestamptz,
    lease_owner              text,
    lease_expires_at         timestamptz,
    error_code               text,
    error_message            text,
    -- AES-256-GCM ciphertext of the signed payload and the id of the key that sealed it; both NULL
    -- once the retention job redacted them (redacted_at says when).
    signed_payload           bytea,
    payload_key_id           text,
    redacted_at              timestamptz,
    trace_id                 text,
    republished_at           timestamptz,
    received_at              timestamptz NOT NULL DEFAULT now(),
    processed_at             timestamptz,
    updated_at               timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT inbound_event_pkey PRIMARY KEY (id, received_at),
    CONSTRAINT inbound_event_notification_check CHECK (
        kind <> 'notification'
        OR (notification_uuid IS NOT NULL AND notification_type IS NOT NULL
            AND submission_kind IS NULL AND user_id IS NULL AND order_no IS NULL)),
    CONSTRAINT inbound_event_submission_check CHECK (
        kind <> 'submission'
        OR (submission_kind IN ('CLIENT', 'OBSERVED') AND user_id IS NOT NULL AND transaction_id IS NOT NULL
            AND original_transaction_id IS NOT NULL AND payload_hash IS NOT NULL
            AND notification_uuid IS NULL AND notification_type IS NULL AND subtype IS NULL AND signed_date IS NULL))
) PARTITION BY RANGE (received_at);

-- Rows of a month without a partition yet (the job fell behind) land here and are moved into their
-- month's partition when it is created; never detached.
CREATE TABLE inbound_event_default PARTITION OF inbound_event DEFAULT;

CREATE TABLE inbound_event_key (
    id                 bigint PRIMARY KEY DEFAULT nextval('inbound_event_id_seq'),
    received_at        timestamptz NOT NULL,
    notification_uuid  text CONSTRAINT inbound_event_key_notification_uuid_key UNIQUE,
    submission_kind    text,
    user_id            text,
    order_no           text,
    payload_hash       text,
    CONSTRAINT inbound_event_key_kind_check CHECK ((notification_uuid IS NULL) <> (submission_kind IS NULL))
);
ALTER SEQUENCE inbound_event_id_seq OWNED BY inbound_event_key.id;
-- The same JWS uploaded again (for the same order, or observed again) is the same submission.
CREATE UNIQUE INDEX inbound_event_key_submission_key
    ON inbound_event_key (submission_kind, user_id, coalesce(order_no, ''), payload_hash) WHERE submission_kind IS NOT NULL;

-- The month of `p_month` gets its partition unless it has one (true when created). Built apart and
-- attached, which does not block writers of the other months; rows the default partition holds for
-- the month move in first.
CREATE FUNCTION create_inbound_event_partition(p_month date) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    first_day date := date_trunc('month', p_month)::date;
    partition text := 'inbound_event_' || to_char(first_day, 'YYYY_MM');
    low timestamptz := first_day::timestamp AT TIME ZONE 'UTC';
    high timestamptz := (first_day + interval '1 month')::timestamp AT TIME ZONE 'UTC';
BEGIN
    IF to_regclass(quote_ident(partition)) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE inbound_event INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', partition);
    EXECUTE format(
        'WITH moved AS (DELETE FROM inbound_event_default WHERE received_at >= %L AND received_at < %L RETURNING *)
         INSERT INTO %I SELECT * FROM moved', low, high, partition);
    EXECUTE format('ALTER TABLE inbound_event ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', partition, low, high);
    RETURN true;
END;
$$;

-- Detaches a month's partition unless events in it are still on their way (false then). Detaching
-- with a default partition takes the parent exclusively; taking that first, before the partition,
-- leaves no lock to upgrade and so no deadlock with a writer.
CREATE FUNCTION detach_inbound_event_partition(p_partition text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    open boolean;
BEGIN
    LOCK TABLE inbound_event IN ACCESS EXCLUSIVE MODE;
    EXECUTE format(
        'SELECT EXISTS (SELECT 1 FROM %I WHERE process_status IN (''RECEIVED'', ''PROCESSING'', ''RETRY_WAIT''))',
        p_partition) INTO open;
    IF open THEN
        RETURN false;
    END IF;
    EXECUTE format('ALTER TABLE inbound_event DETACH PARTITION %I', p_partition);
    RETURN true;
END;
$$;

-- Deletes the key rows of up to p_limit events of a detached month with ids above p_after; returns
-- the highest id handled. When none is left it renames the table inbound_event_detached_YYYY_MM
-- (so it is never visited again) and returns NULL.
CREATE FUNCTION release_inbound_event_keys(p_partition text, p_after bigint, p_limit integer) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    last bigint;
BEGIN
    EXECUTE format(
        'WITH batch AS (SELECT id FROM %I WHERE id > $1 ORDER BY id LIMIT $2),
              released AS (DELETE FROM inbound_event_key k USING batch b WHERE k.id = b.id)
         SELECT max(id) FROM batch', p_partition) INTO last USING p_after, p_limit;
    IF last IS NULL THEN
        EXECUTE format('ALTER TABLE %I RENAME TO %I', p_partition, replace(p_partition, 'inbound_event_', 'inbound_event_detached_'));
    END IF;
    RETURN last;
END;
$$;

-- Every month of the existing rows, this one and the next (EVENT_PARTITIONS_AHEAD's default).
DO $$
DECLARE
    month date;
BEGIN
    FOR month IN
        SELECT generate_series(
            date_trunc('month', least(coalesce((SELECT min(received_at) FROM inbound_event_unpartitioned), now()), now()) AT TIME ZONE 'UTC'),
            date_trunc('month', now() AT TIME ZONE 'UTC') + interval '1 month', interval '1 month')::date
    LOOP
        PERFORM create_inbound_event_partition(month);
    END LOOP;
END;
$$;

INSERT INTO inbound_event_key (id, received_at, notification_uuid, submission_kind, user_id, order_no, payload_hash)
SELECT id, received_at, notification_uuid, submission_kind,
       CASE WHEN kind = 'submission' THEN user_id END, CASE WHEN kind = 'submission' THEN order_no END,
       CASE WHEN kind = 'submission' THEN payload_hash END
  FROM inbound_event_unpartitioned;
INSERT INTO inbound_event (
    id, kind, notification_uuid, notification_type, subtype, submission_kind, user_id, order_no, payload_hash,
    environment, signed_date, transaction_id, original_transaction_id, routing_key, process_status, retry_count,
    next_retry_at, lease_owner, lease_expires_at, error_code, error_message, signed_payload, payload_key_id, trace_id,
    republished_at, received_at, processed_at, updated_at)
SELECT id, kind, notification_uuid, notification_type, subtype, submission_kind, user_id, order_no, payload_hash,
       environment, signed_date, transaction_id, original_transaction_id, routing_key, process_status, retry_count,
       next_retry_at, lease_owner, lease_expires_at, error_code, error_message, signed_payload, payload_key_id, trace_id,
       republished_at, received_at, processed_at, updated_at
  FROM inbound_event_unpartitioned;
DROP TABLE inbound_event_unpartitioned;

-- The indexes of 0001-0015 (built once, after the copy), without the UUID's and the submission's
-- unique keys, which inbound_event_key holds.
CREATE INDEX inbound_event_due_idx ON inbound_event (next_retry_at) WHERE process_status = 'RETRY_WAIT';
CREATE INDEX inbound_event_lease_idx ON inbound_event (lease_expires_at) WHERE process_status = 'PROCESSING';
CREATE INDEX inbound_event_received_idx ON inbound_event (received_at) WHERE process_status = 'RECEIVED';
CREATE INDEX inbound_event_otid_idx ON inbound_event (original_transaction_id);
CREATE INDEX inbound_event_dead_idx ON inbound_event (error_code) WHERE process_status = 'DEAD';
CREATE INDEX inbound_event_notification_received_idx ON inbound_event (environment, received_at) WHERE kind = 'notification';
CREATE INDEX inbound_event_chain_dead_idx ON inbound_event (environment, original_transaction_id) WHERE process_status = 'DEAD';
CREATE INDEX inbound_event_transaction_idx ON inbound_event (transaction_id) WHERE transaction_id IS NOT NULL;
CREATE INDEX inbound_event_submitter_idx ON inbound_event (user_id) WHERE kind = 'submission';
CREATE INDEX inbound_event_queue_idx ON inbound_event (process_status, error_code, id);
-- The payloads the retention job has yet to redact, oldest first: applied events only, so intake
-- writes no entry (an event enters it with the completion's update, which the status indexes
-- above already make a non-HOT one) and the index holds what waits for redaction, nothing else.
CREATE INDEX inbound_event_unredacted_idx ON inbound_event (received_at)
    WHERE process_status = 'SUCCEEDED' AND redacted_at IS NULL;
