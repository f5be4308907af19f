-- Imports of existing purchases (restore, migration to this back end): a user proves a purchase
-- with a signed StoreKit 2 transaction or a StoreKit 1 app receipt; a worker asks Apple's Get
-- Transaction History with it, stores what Apple returns as facts and binds the chains the
-- caller may have. One import per user, environment and proving transaction id (for a signed
-- transaction, its original transaction id: every transaction of a chain is the same import).
CREATE TABLE subscription_import (
    id                     bigserial PRIMARY KEY,
    user_id                text NOT NULL REFERENCES app_user (user_id),
    environment            text NOT NULL CHECK (environment IN ('Production', 'Sandbox')),
    source                 text NOT NULL CHECK (source IN ('SIGNED_TRANSACTION', 'APP_RECEIPT')),
    lookup_transaction_id  text NOT NULL,
    -- PENDING until the worker stored Apple's answer (FETCHED), ACCOUNT_CONFLICT when a chain is
    -- another user's (its facts are still stored and applied to their owner), FAILED.
    status                 text NOT NULL DEFAULT 'PENDING'
                           CHECK (status IN ('PENDING', 'FETCHED', 'ACCOUNT_CONFLICT', 'FAILED')),
    original_transaction_ids text[] NOT NULL DEFAULT '{}',
    event_ids              bigint[] NOT NULL DEFAULT '{}',
    error_code             text,
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT subscription_import_key UNIQUE (user_id, environment, lookup_transaction_id)
);

ALTER TABLE fulfillment_task ADD COLUMN import_id bigint REFERENCES subscription_import (id);
ALTER TABLE fulfillment_task DROP CONSTRAINT fulfillment_task_kind_check;
ALTER TABLE fulfillment_task ADD CONSTRAINT fulfillment_task_kind_check
    CHECK (kind IN ('REQUERY', 'RECOVERY', 'SET_APP_ACCOUNT_TOKEN', 'IMPORT'));
ALTER TABLE fulfillment_task ADD CONSTRAINT fulfillment_task_import CHECK ((kind = 'IMPORT') = (import_id IS NOT NULL));
