-- Daily bills: each user's UTC day of usage, closed once the day is over. The read API pages
-- through them; the credits processing fills them. Amounts are micro-credits, like the ledger.
CREATE TABLE credit_daily_bill (
    id          bigserial PRIMARY KEY,
    user_id     text NOT NULL REFERENCES app_user (user_id),
    day         date NOT NULL,
    -- The exact sum of the day's usage costs.
    total_cost  bigint NOT NULL DEFAULT 0 CHECK (total_cost >= 0),
    -- The total rounded UP to a whole credit: what the day costs the user.
    charged     bigint NOT NULL DEFAULT 0 CHECK (charged >= 0),
    -- charged - total_cost, deducted when the day is closed.
    rounding    bigint NOT NULL DEFAULT 0 CHECK (rounding >= 0),
    -- The part of the rounding actually deducted at close...
    settled     bigint NOT NULL DEFAULT 0 CHECK (settled >= 0),
    -- ...and the part the balance could not cover (a balance never goes negative).
    shortfall   bigint NOT NULL DEFAULT 0 CHECK (shortfall >= 0),
    closed_at   timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- Also the index the read API pages through (user_id, day DESC).
    CONSTRAINT credit_daily_bill_key UNIQUE (user_id, day)
);
