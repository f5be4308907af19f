-- Monthly plans with a 12-month commitment (App Store Server API, billingPlanType and
-- commitmentInfo). The catalogue states how each product is billed; each monthly charge keeps its
-- place in the commitment, and the renewal info what the commitment renews into, so the rules
-- (a cancellation inside the commitment keeps the plan to its end) can be applied and shown again
-- from the stored facts alone.
ALTER TABLE payment_product
    ADD COLUMN billing_plan_type text NOT NULL DEFAULT 'BILLED_UPFRONT'
        CHECK (billing_plan_type IN ('BILLED_UPFRONT', 'MONTHLY'));

-- Apple's values are kept as signed (a new billing plan type passes through, as ownership types do).
ALTER TABLE apple_transaction
    ADD COLUMN billing_plan_type text,
    ADD COLUMN commitment_billing_period integer,
    ADD COLUMN commitment_total_periods integer,
    ADD COLUMN commitment_expires_date timestamptz,
    ADD COLUMN commitment_price_milliunits bigint;

ALTER TABLE apple_renewal_info
    ADD COLUMN renewal_billing_plan_type text,
    ADD COLUMN commitment_auto_renew_product_id text,
    ADD COLUMN commitment_auto_renew_enabled boolean,
    ADD COLUMN commitment_renewal_billing_plan_type text,
    ADD COLUMN commitment_renewal_date timestamptz,
    ADD COLUMN commitment_renewal_price_milliunits bigint;
