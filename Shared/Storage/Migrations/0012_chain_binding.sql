-- Who a chain belongs to when its facts do not say: a purchase made without an appAccountToken
-- (an offer code redeemed in the App Store, a subscriber from before this back end) or with a
-- token issued by another system, a family member's shared access (Apple never puts the
-- member's token on it), a chain imported by its user. An operator's resolution of an account
-- conflict (RESOLUTION) outranks even the tokens on the facts; every other binding only stands
-- where the facts name nobody, and a token of another user is still an account conflict.
CREATE TABLE chain_binding (
    environment              text NOT NULL CHECK (environment IN ('Production', 'Sandbox')),
    original_transaction_id  text NOT NULL,
    user_id                  text NOT NULL REFERENCES app_user (user_id),
    source                   text NOT NULL CHECK (source IN ('OPERATOR', 'RESOLUTION', 'IMPORT', 'FAMILY')),
    -- Apple's Set App Account Token for the chain, so its later facts carry the user's token:
    -- PENDING (a task asks), SET, FAMILY_NOT_SUPPORTED (Apple refuses family transactions), FAILED;
    -- NULL when it is not asked (a family member's binding: Apple refuses those).
    apple_token_status       text CHECK (apple_token_status IN ('PENDING', 'SET', 'FAMILY_NOT_SUPPORTED', 'FAILED')),
    apple_token_task_id      bigint,
    created_by               text NOT NULL,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (environment, original_transaction_id)
);
CREATE INDEX chain_binding_user_idx ON chain_binding (user_id);

-- A chain's DEAD events, found when a binding or a resolution replays them.
CREATE INDEX inbound_event_chain_dead_idx ON inbound_event (environment, original_transaction_id)
    WHERE process_status = 'DEAD';

-- Set App Account Token is a task like the re-query: retried under a lease, its outcome kept.
ALTER TABLE fulfillment_task DROP CONSTRAINT fulfillment_task_kind_check;
ALTER TABLE fulfillment_task ADD CONSTRAINT fulfillment_task_kind_check
    CHECK (kind IN ('REQUERY', 'RECOVERY', 'SET_APP_ACCOUNT_TOKEN'));
ALTER TABLE fulfillment_task DROP CONSTRAINT fulfillment_task_requery_chain;
ALTER TABLE fulfillment_task ADD CONSTRAINT fulfillment_task_requery_chain
    CHECK ((kind IN ('REQUERY', 'SET_APP_ACCOUNT_TOKEN')) = (original_transaction_id IS NOT NULL));
