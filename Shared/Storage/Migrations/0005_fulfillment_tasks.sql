-- What the workers do besides applying events: re-query a chain's status from Apple, recover
-- notifications from Apple's history, answer consumption requests, expire stale orders.

-- Re-queries and recoveries, requested by a worker (a chain whose facts disagree, the start-up
-- window) or by an operator (`subsctl requery`, `subsctl recover`). One worker at a time holds a
-- task under a lease; a recovery records where its paging stopped, so another worker resumes it.
CREATE TABLE fulfillment_task (
    id                       bigserial PRIMARY KEY,
    kind                     text NOT NULL CHECK (kind IN ('REQUERY', 'RECOVERY')),
    environment              text NOT NULL CHECK (environment IN ('Production', 'Sandbox')),
    -- REQUERY: the chain.
    original_transaction_id  text,
    -- RECOVERY: the range asked of Get Notification History, and the next page's token.
    range_start              timestamptz,
    range_end                timestamptz,
    pagination_token         text,
    reason                   text NOT NULL,
    requested_by             text NOT NULL,
    -- At most one PENDING task per key that no worker took yet (a chain flagged again, every
    -- worker's start-up window); a claim clears it.
    dedup_key                text,
    status                   text NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'DONE', 'FAILED')),
    attempts                 integer NOT NULL DEFAULT 0,
    next_attempt_at          timestamptz NOT NULL DEFAULT now(),
    lease_owner              text,
    lease_expires_at         timestamptz,
    -- Counters and the events written, for the operator who asked.
    result                   jsonb NOT NULL DEFAULT '{}',
    error_code               text,
    error_message            text,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    completed_at             timestamptz,
    CONSTRAINT fulfillment_task_requery_chain CHECK ((kind = 'REQUERY') = (original_transaction_id IS NOT NULL)),
    CONSTRAINT fulfillment_task_recovery_range CHECK (kind <> 'RECOVERY' OR range_end > range_start)
);
CREATE UNIQUE INDEX fulfillment_task_pending_key ON fulfillment_task (dedup_key) WHERE status = 'PENDING';
CREATE INDEX fulfillment_task_due_idx ON fulfillment_task (next_attempt_at) WHERE status = 'PENDING';
CREATE INDEX fulfillment_task_chain_idx ON fulfillment_task (environment, original_transaction_id, created_at)
    WHERE kind = 'REQUERY';

-- The detector of disagreeing chains reads the renewal infos changed since its last pass.
CREATE INDEX apple_renewal_info_updated_idx ON apple_renewal_info (updated_at);

-- Open purchase intents by age, for the stale-order expiry.
CREATE INDEX payment_order_open_age_idx ON payment_order (created_at) WHERE status IN ('CREATED', 'PENDING');

-- What a user agreed to share. No row: unknown, which counts as no.
CREATE TABLE user_consent (
    user_id      text NOT NULL REFERENCES app_user (user_id),
    purpose      text NOT NULL CHECK (purpose IN ('CONSUMPTION_DATA')),
    granted      boolean NOT NULL,
    recorded_by  text NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, purpose)
);

-- One answer per CONSUMPTION_REQUEST notification: sent to Apple, or why not.
CREATE TABLE consumption_answer (
    notification_uuid  text PRIMARY KEY,
    environment        text NOT NULL,
    transaction_id     text,
    user_id            text,
    outcome            text NOT NULL CHECK (outcome IN ('SENT', 'NO_CONSENT', 'CONSENT_UNKNOWN', 'NO_TRANSACTION',
                           'API_NOT_CONFIGURED', 'REFUSED')),
    -- The body sent (no secret: Apple's codes and the user's appAccountToken).
    request            jsonb,
    error_message      text,
    created_at         timestamptz NOT NULL DEFAULT now()
);
