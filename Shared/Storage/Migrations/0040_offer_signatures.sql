-- Offer signatures: per product, the promotional offers the app may ask our server to sign and
-- who may get each (`[{"offerIdentifier": …, "audience": …}]`), and whether it has an
-- introductory offer whose eligibility we sign; and the audit of every signature handed out,
-- for whom, for which transaction, with its nonce (Apple's one-time value, so a signature a
-- user reports can be found).
ALTER TABLE payment_product
    ADD COLUMN offers jsonb NOT NULL DEFAULT '[]',
    ADD COLUMN introductory_offer boolean NOT NULL DEFAULT false;

CREATE TABLE offer_signature (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    product_id text NOT NULL,
    kind text NOT NULL CHECK (kind IN ('PROMOTIONAL', 'INTRODUCTORY_ELIGIBILITY')),
    offer_identifier text,
    allow_introductory_offer boolean,
    transaction_id text,
    key_id text NOT NULL,
    nonce uuid NOT NULL UNIQUE,
    signed_at timestamptz NOT NULL,
    CHECK ((kind = 'PROMOTIONAL') = (offer_identifier IS NOT NULL)),
    CHECK ((kind = 'INTRODUCTORY_ELIGIBILITY') = (allow_introductory_offer IS NOT NULL))
);
CREATE INDEX offer_signature_user_idx ON offer_signature (user_id, signed_at DESC);
