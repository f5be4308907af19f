-- The monthly grants of longer periods (P2M…P1Y plans, multi-month offers) looked for their
-- candidates among every ACTIVE or GRACE chain, joined to its current transaction, then filtered
-- by the product's duration: on a database of 500,000 chains, all monthly, that read took 10 s
-- and ran at each job run and each gauge sample. Now the candidates are found from the two sides
-- that can have months due: chains whose current product is a longer plan (by product, among
-- the paid chains), and transactions of the last 13 months that carry an offer period.
CREATE INDEX user_subscription_paid_product_idx ON user_subscription (active_product_id)
    WHERE status IN ('ACTIVE', 'GRACE') AND frozen_reason IS NULL;
CREATE INDEX apple_transaction_offer_period_idx ON apple_transaction (purchase_date) WHERE offer_period IS NOT NULL;
