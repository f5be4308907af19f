-- Business state: catalogue, users, orders, Apple facts, the subscription projection, credits,
-- and the trails (status history, audit). Money and credits are integers; times are UTC.

CREATE TABLE payment_product (
    id                           bigserial PRIMARY KEY,
    channel                      text NOT NULL DEFAULT 'APPLE',
    app_key                      text NOT NULL,
    product_id                   text NOT NULL,
    subscription_group_id        text NOT NULL,
    plan_code                    text NOT NULL,
    plan_level                   integer NOT NULL CHECK (plan_level >= 1),
    duration                     text NOT NULL CHECK (duration IN ('MONTH', 'YEAR')),
    credits_amount               bigint NOT NULL CHECK (credits_amount >= 0),
    enabled                      boolean NOT NULL DEFAULT true,
    trial_grants_credits         boolean NOT NULL DEFAULT true,
    upgrade_grant                text NOT NULL DEFAULT 'FULL' CHECK (upgrade_grant IN ('FULL', 'DIFFERENCE')),
    family_shared_grants_credits boolean NOT NULL DEFAULT false,
    version                      integer NOT NULL DEFAULT 1,
    deleted                      boolean NOT NULL DEFAULT false,
    created_at                   timestamptz NOT NULL DEFAULT now(),
    updated_at                   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT payment_product_key UNIQUE (channel, app_key, product_id)
);

-- Business users as far as this service knows them; Sandbox facts only touch test users.
CREATE TABLE app_user (
    user_id        text PRIMARY KEY,
    is_test_user   boolean NOT NULL DEFAULT false,
    created_at     timestamptz NOT NULL DEFAULT now()
);

-- A random token per user (never derived from the user id, phone or e-mail), given to StoreKit.
CREATE TABLE user_account_token (
    user_id            text PRIMARY KEY REFERENCES app_user (user_id),
    app_account_token  uuid NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT user_account_token_token_key UNIQUE (app_account_token)
);

CREATE TABLE payment_order (
    id                       bigserial PRIMARY KEY,
    order_no                 text NOT NULL,
    user_id                  text NOT NULL REFERENCES app_user (user_id),
    channel                  text NOT NULL DEFAULT 'APPLE',
    product_id               text NOT NULL,
    subscription_group_id    text,
    request_id               text,
    order_type               text NOT NULL CHECK (order_type IN ('INITIAL', 'RENEWAL', 'CHANGE', 'RECOVERY')),
    status                   text NOT NULL CHECK (status IN ('CREATED', 'PENDING', 'VERIFIED', 'FULFILLED',
                                 'CANCELLED', 'EXPIRED', 'FAILED_RETRYABLE', 'FAILED')),
    transaction_id           text,
    original_transaction_id  text,
    requested_environment    text,
    environment              text,
    amount_milliunits        bigint,
    currency                 text,
    failure_code             text,
    app_account_token        uuid,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT payment_order_order_no_key UNIQUE (order_no),
    CONSTRAINT payment_order_request_key UNIQUE (user_id, request_id)
);
CREATE UNIQUE INDEX payment_order_transaction_key ON payment_order (channel, environment, transaction_id)
    WHERE transaction_id IS NOT NULL;
CREATE INDEX payment_order_open_idx ON payment_order (user_id, subscription_group_id)
    WHERE status IN ('CREATED', 'PENDING');

CREATE TABLE apple_transaction (
    id                       bigserial PRIMARY KEY,
    environment              text NOT NULL,
    transaction_id           text NOT NULL,
    original_transaction_id  text NOT NULL,
    web_order_line_item_id   text,
    app_account_token        text,
    user_id                  text,
    product_id               text NOT NULL,
    transaction_reason       text,
    purchase_date            timestamptz NOT NULL,
    original_purchase_date   timestamptz,
    expires_date             timestamptz,
    revocation_date          timestamptz,
    revocation_type          text,
    revocation_reason        integer,
    ownership_type           text NOT NULL,
    offer_type               integer,
    offer_identifier         text,
    offer_discount_type      text,
    is_upgraded              boolean NOT NULL DEFAULT false,
    price_milliunits         bigint,
    currency                 text,
    signed_date              timestamptz NOT NULL,
    payload_hash             text NOT NULL,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT apple_transaction_key UNIQUE (environment, transaction_id)
);
CREATE INDEX apple_transaction_chain_idx ON apple_transaction (environment, original_transaction_id);

-- The newest renewal info per chain (by Apple's signedDate).
CREATE TABLE apple_renewal_info (
    environment              text NOT NULL,
    original_transaction_id  text NOT NULL,
    product_id               text NOT NULL,
    auto_renew_product_id    text,
    auto_renew_enabled       boolean NOT NULL,
    is_in_billing_retry      boolean NOT NULL DEFAULT false,
    grace_period_expires_at  timestamptz,
    expiration_intent        integer,
    price_increase_status    integer,
    renewal_date             timestamptz,
    signed_date              timestamptz NOT NULL,
    updated_at               timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (environment, original_transaction_id)
);

CREATE TABLE user_subscription (
    id                       bigserial PRIMARY KEY,
    environment              text NOT NULL,
    original_transaction_id  text NOT NULL,
    user_id                  text NOT NULL REFERENCES app_user (user_id),
    subscription_group_id    text,
    active_product_id        text NOT NULL,
    pending_product_id       text,
    status                   text NOT NULL CHECK (status IN ('ACTIVE', 'GRACE', 'BILLING_RETRY', 'EXPIRED', 'REVOKED')),
    auto_renew_enabled       boolean NOT NULL,
    expires_at               timestamptz,
    grace_expires_at         timestamptz,
    last_transaction_id      text NOT NULL,
    last_signed_date         timestamptz NOT NULL,
    is_family_shared         boolean NOT NULL DEFAULT false,
    -- Set by an account conflict: nothing moves on this chain until an operator clears it.
    frozen_reason            text,
    version                  integer NOT NULL DEFAULT 1,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT user_subscription_chain_key UNIQUE (environment, original_transaction_id)
);
CREATE INDEX user_subscription_user_idx ON user_subscription (user_id);

-- Every change of an order's or a subscription's status, with its cause.
CREATE TABLE status_history (
    id               bigserial PRIMARY KEY,
    entity_type      text NOT NULL CHECK (entity_type IN ('ORDER', 'SUBSCRIPTION')),
    entity_key       text NOT NULL,
    previous_status  text,
    current_status   text NOT NULL,
    cause            text NOT NULL,
    event_kind       text,
    event_id         bigint,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX status_history_entity_idx ON status_history (entity_type, entity_key, id);

-- Every manual action: who, why, what it was before and after.
CREATE TABLE audit_log (
    id          bigserial PRIMARY KEY,
    operator    text NOT NULL,
    action      text NOT NULL,
    reason      text NOT NULL,
    before      jsonb,
    after       jsonb,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Credits: a balance per user and pool, never negative, always the sum of its ledger entries.
CREATE TABLE credit_account (
    user_id     text NOT NULL REFERENCES app_user (user_id),
    pool        text NOT NULL CHECK (pool IN ('SUBSCRIPTION', 'WELCOME', 'PERMANENT')),
    balance     bigint NOT NULL DEFAULT 0 CHECK (balance >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, pool)
);

CREATE TABLE credit_grant (
    id                       bigserial PRIMARY KEY,
    grant_key                text NOT NULL,
    user_id                  text NOT NULL REFERENCES app_user (user_id),
    pool                     text NOT NULL,
    amount                   bigint NOT NULL CHECK (amount > 0),
    revoked_amount           bigint NOT NULL DEFAULT 0 CHECK (revoked_amount >= 0),
    unrecoverable_amount     bigint NOT NULL DEFAULT 0 CHECK (unrecoverable_amount >= 0),
    reason                   text NOT NULL,
    environment              text,
    transaction_id           text,
    original_transaction_id  text,
    created_at               timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT credit_grant_key UNIQUE (grant_key)
);
CREATE INDEX credit_grant_user_idx ON credit_grant (user_id, created_at DESC, id DESC);
CREATE INDEX credit_grant_transaction_idx ON credit_grant (environment, transaction_id);

CREATE TABLE credit_ledger (
    id             bigserial PRIMARY KEY,
    user_id        text NOT NULL,
    pool           text NOT NULL,
    delta          bigint NOT NULL,
    balance_after  bigint NOT NULL CHECK (balance_after >= 0),
    entry_type     text NOT NULL CHECK (entry_type IN ('GRANT', 'USAGE', 'REVOCATION', 'RESTORATION',
                       'EXPIRY_CLEARING', 'DAILY_SETTLEMENT', 'ADJUSTMENT')),
    reference      text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX credit_ledger_account_idx ON credit_ledger (user_id, pool, id);

-- Signed transactions uploaded by clients (with an order number) or observed by them
-- (Transaction.updates, no order number). They travel the same path as notifications: stored,
-- published keyed by original transaction id, claimed under a lease by a worker.
CREATE TABLE transaction_submission (
    id                       bigserial PRIMARY KEY,
    submission_kind          text NOT NULL CHECK (submission_kind IN ('CLIENT', 'OBSERVED')),
    user_id                  text NOT NULL,
    order_no                 text,
    environment              text NOT NULL,
    transaction_id           text NOT NULL,
    original_transaction_id  text NOT NULL,
    payload_hash             text NOT NULL,
    routing_key              text NOT NULL,
    process_status           text NOT NULL DEFAULT 'RECEIVED'
        CHECK (process_status IN ('RECEIVED', 'PROCESSING', 'RETRY_WAIT', 'SUCCEEDED', 'DEAD')),
    retry_count              integer NOT NULL DEFAULT 0,
    next_retry_at            timestamptz,
    lease_owner              text,
    lease_expires_at         timestamptz,
    error_code               text,
    error_message            text,
    signed_payload           bytea,
    payload_key_id           text,
    trace_id                 text,
    republished_at           timestamptz,
    received_at              timestamptz NOT NULL DEFAULT now(),
    processed_at             timestamptz,
    updated_at               timestamptz NOT NULL DEFAULT now()
);
-- The same JWS uploaded again (for the same order, or observed again) is the same submission.
CREATE UNIQUE INDEX transaction_submission_dedup_key
    ON transaction_submission (submission_kind, user_id, coalesce(order_no, ''), payload_hash);
CREATE INDEX transaction_submission_due_idx ON transaction_submission (next_retry_at)
    WHERE process_status = 'RETRY_WAIT';
CREATE INDEX transaction_submission_lease_idx ON transaction_submission (lease_expires_at)
    WHERE process_status = 'PROCESSING';
CREATE INDEX transaction_submission_received_idx ON transaction_submission (received_at)
    WHERE process_status = 'RECEIVED';
