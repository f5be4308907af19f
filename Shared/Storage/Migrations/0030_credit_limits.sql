-- Money arithmetic that cannot trap. A pool holds at most CREDITS_MAX_BALANCE; a grant that
-- would take it past that is not booked. A fulfillment event with such a grant is set aside (DEAD,
-- AMOUNT_OUT_OF_RANGE, kept for replay); a credit job's grant is recorded here instead, so that
-- the job does not try it again at every pass and an operator can see what was not given.
CREATE TABLE credit_grant_refusal (
    grant_key   text PRIMARY KEY,
    user_id     text NOT NULL,
    pool        text NOT NULL,
    amount      bigint NOT NULL,
    reason      text NOT NULL,
    error_code  text NOT NULL,
    refused_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX credit_grant_refusal_user_idx ON credit_grant_refusal (user_id);

-- A bill the daily close could not settle (a total whose rounding leaves the 64-bit range, which
-- only a hand-edited row can hold) is set aside with its reason instead of failing every other
-- user's close; it is tried again at the next UTC day's run.
ALTER TABLE credit_daily_bill ADD COLUMN close_failure text, ADD COLUMN close_failed_at timestamptz;
