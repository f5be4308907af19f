-- Fulfillment: facts the worker could not attribute, kept with their summary so an operator can
-- see what is waiting and replay it once the cause is fixed; and the replay helper itself.

CREATE TABLE unmatched_fact (
    id                       bigserial PRIMARY KEY,
    event_kind               text NOT NULL,
    event_id                 bigint NOT NULL,
    reason                   text NOT NULL CHECK (reason IN ('UNMATCHED_PRODUCT', 'UNMATCHED_ACCOUNT')),
    environment              text NOT NULL,
    notification_type        text,
    subtype                  text,
    transaction_id           text,
    original_transaction_id  text,
    product_id               text,
    app_account_token        text,
    -- The logged-in user of a client submission (never used for attribution).
    submitted_by             text,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    -- Set when the event was put back for processing; cleared if it comes back unmatched.
    replayed_at              timestamptz,
    CONSTRAINT unmatched_fact_event_key UNIQUE (event_kind, event_id)
);
CREATE INDEX unmatched_fact_waiting_idx ON unmatched_fact (reason, created_at) WHERE replayed_at IS NULL;

-- Dead events, by error code, for operators and the replay helper.
CREATE INDEX apple_notification_event_dead_idx ON apple_notification_event (error_code) WHERE process_status = 'DEAD';
CREATE INDEX transaction_submission_dead_idx ON transaction_submission (error_code) WHERE process_status = 'DEAD';

-- Puts every DEAD event with this error code (e.g. UNMATCHED_PRODUCT after the product was added,
-- ACCOUNT_CONFLICT after an operator cleared a frozen chain) back to RECEIVED with a fresh retry
-- budget. The sweeper re-publishes RECEIVED events older than EVENT_STUCK_AFTER_SECONDS, so they
-- are applied within a sweep or two; applying is idempotent, so replaying too much is harmless.
-- Returns how many events were put back.   Usage: SELECT replay_dead_events('UNMATCHED_PRODUCT');
CREATE FUNCTION replay_dead_events(p_error_code text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    notifications integer;
    submissions integer;
BEGIN
    UPDATE apple_notification_event
       SET process_status = 'RECEIVED', retry_count = 0, next_retry_at = NULL, error_code = NULL,
           error_message = NULL, republished_at = NULL, updated_at = now()
     WHERE process_status = 'DEAD' AND error_code = p_error_code;
    GET DIAGNOSTICS notifications = ROW_COUNT;
    UPDATE transaction_submission
       SET process_status = 'RECEIVED', retry_count = 0, next_retry_at = NULL, error_code = NULL,
           error_message = NULL, republished_at = NULL, updated_at = now()
     WHERE process_status = 'DEAD' AND error_code = p_error_code;
    GET DIAGNOSTICS submissions = ROW_COUNT;
    UPDATE unmatched_fact SET replayed_at = now(), updated_at = now()
     WHERE reason = p_error_code AND replayed_at IS NULL;
    RETURN notifications + submissions;
END;
$$;

-- Milliseconds since 1970, the unit of Apple's dates: the worker reads stored facts as JSON and
-- gets back exactly the instants it wrote.
CREATE FUNCTION epoch_ms(timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT (extract(epoch FROM $1) * 1000)::bigint $$;
