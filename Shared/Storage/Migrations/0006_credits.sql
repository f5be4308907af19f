-- Credits metering and schedules: rate versions, usage events (one per service and idempotency
-- key, with the first answer), and the bookkeeping the schedulers need to run each step once.
-- Amounts are integer micro-credits, like the ledger.

-- What one unit of a metered call costs, by version. The version in force at an event's time is
-- the one with the latest effective_from not after it. Operators load them (`subsctl rates apply`).
CREATE TABLE credit_rate_version (
    code                    text NOT NULL,
    version                 integer NOT NULL CHECK (version >= 1),
    micro_credits_per_unit  bigint NOT NULL CHECK (micro_credits_per_unit > 0),
    effective_from          timestamptz NOT NULL,
    created_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (code, version),
    CONSTRAINT credit_rate_version_effective_key UNIQUE (code, effective_from)
);

-- An accepted metered call. A retry under the same (service, idempotency_key) gets `response`
-- back; another request under that key is a conflict. Refused calls change nothing, so they are
-- not stored.
CREATE TABLE credit_usage_event (
    id                bigserial PRIMARY KEY,
    service           text NOT NULL,
    idempotency_key   text NOT NULL,
    user_id           text NOT NULL REFERENCES app_user (user_id),
    units             bigint NOT NULL CHECK (units > 0),
    rate_code         text NOT NULL,
    rate_version      integer NOT NULL,
    cost              bigint NOT NULL CHECK (cost > 0),
    -- The event time the caller gave (NULL: none), compared on retries, and the one used.
    requested_at      timestamptz,
    occurred_at       timestamptz NOT NULL,
    -- The UTC day whose bill counts this cost (the day it was deducted).
    bill_day          date NOT NULL,
    -- The first answer, as sent.
    response          text NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT credit_usage_event_key UNIQUE (service, idempotency_key)
);
CREATE INDEX credit_usage_event_user_idx ON credit_usage_event (user_id, bill_day);

-- The daily close looks for bills still open from past days.
CREATE INDEX credit_daily_bill_open_idx ON credit_daily_bill (day, user_id) WHERE closed_at IS NULL;

-- Each true expiry (a chain's last transaction reaching EXPIRED or REVOKED) is handled once: its
-- user's SUBSCRIPTION pool cleared, or nothing when the user was entitled again by then.
CREATE TABLE credit_expiry_clearing (
    environment              text NOT NULL,
    original_transaction_id  text NOT NULL,
    last_transaction_id      text NOT NULL,
    status                   text NOT NULL,
    user_id                  text NOT NULL,
    cleared_amount           bigint NOT NULL CHECK (cleared_amount >= 0),
    cleared_at               timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (environment, original_transaction_id, last_transaction_id, status)
);
CREATE INDEX user_subscription_ended_idx ON user_subscription (user_id) WHERE status IN ('EXPIRED', 'REVOKED');
