-- Mass renewal-date extensions asked of Apple (Extend Subscription Renewal Dates for All Active
-- Subscribers): one row per request identifier, so a second run of the same request finds it and
-- follows Apple's status instead of extending everyone again. Apple's status (complete, counts) is
-- copied here each time it is read, so the admin API shows the last known progress without Apple.
CREATE TABLE apple_renewal_extension (
    request_identifier uuid PRIMARY KEY,
    environment text NOT NULL,
    product_id text NOT NULL,
    extend_by_days integer NOT NULL CHECK (extend_by_days BETWEEN 1 AND 90),
    extend_reason_code integer NOT NULL CHECK (extend_reason_code BETWEEN 0 AND 3),
    -- Comma-separated ISO 3166-1 alpha-3 codes; NULL: every storefront.
    storefront_country_codes text,
    reason text NOT NULL,
    requested_by text NOT NULL,
    created_at timestamptz NOT NULL,
    -- Set once Apple accepted the request; NULL while it never did (the next run asks again).
    submitted_at timestamptz,
    last_error text,
    complete boolean NOT NULL DEFAULT false,
    complete_date timestamptz,
    succeeded_count bigint,
    failed_count bigint,
    checked_at timestamptz
);

CREATE INDEX apple_renewal_extension_created_idx ON apple_renewal_extension (created_at DESC);
