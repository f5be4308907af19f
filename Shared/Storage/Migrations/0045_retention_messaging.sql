-- Retention Messaging: per product, the rules choosing what Apple shows a subscriber about to
-- cancel (`[{"messageIdentifier": …, "locales": […], "offerIdentifier": …}]`, first fitting rule
-- first); and what we answered each of Apple's Get Retention Message requests, once per request
-- identifier (Apple's UUID), so a retried request is answered the same and counted once. A user
-- whose consent was rescinded has no row here: the answer to them is not recorded.
ALTER TABLE payment_product ADD COLUMN retention_messages jsonb NOT NULL DEFAULT '[]';

CREATE TABLE retention_message_answer (
    request_identifier uuid PRIMARY KEY,
    environment text NOT NULL,
    original_transaction_id text NOT NULL,
    -- Nil when the chain is not ours (or not yet bound to a user).
    user_id text,
    product_id text NOT NULL,
    user_locale text NOT NULL,
    answer text NOT NULL CHECK (answer IN ('MESSAGE', 'PROMOTIONAL_OFFER', 'DEFAULT')),
    message_identifier uuid,
    offer_identifier text,
    signed_at timestamptz NOT NULL,
    answered_at timestamptz NOT NULL,
    CHECK ((answer = 'DEFAULT') = (message_identifier IS NULL)),
    CHECK ((answer = 'PROMOTIONAL_OFFER') = (offer_identifier IS NOT NULL))
);
CREATE INDEX retention_message_answer_chain_idx ON retention_message_answer (environment, original_transaction_id, answered_at DESC);
CREATE INDEX retention_message_answer_user_idx ON retention_message_answer (user_id, answered_at DESC) WHERE user_id IS NOT NULL;
