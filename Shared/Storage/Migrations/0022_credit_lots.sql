-- Credits as lots: every grant is a lot (pool, amount, source transaction, expiry, remaining).
-- Usage burns the pools in order (SUBSCRIPTION, WELCOME, PERMANENT) and, within a pool, the lot
-- granted first; a refund takes from its own transaction's lots only; a clearing remembers what it
-- took from each lot, so a reversed refund can give exactly that back. The ledger stays the
-- history and a balance the sum of its entries; a pool's lots add up to its balance.

ALTER TABLE credit_grant
    -- What usage, refunds and clearings have left of the lot.
    ADD COLUMN remaining bigint NOT NULL DEFAULT 0 CHECK (remaining >= 0),
    -- The end of the paid period the lot came with (SUBSCRIPTION lots; the pool itself is cleared
    -- at the chain's true ending, as before); NULL: never expires.
    ADD COLUMN expires_at timestamptz,
    -- Set by a refund whatever it could take (a second refund takes nothing; a reversal clears it).
    ADD COLUMN revoked boolean NOT NULL DEFAULT false,
    -- What an expiry clearing took and which ending (environment:original:last:status).
    ADD COLUMN cleared_amount bigint NOT NULL DEFAULT 0 CHECK (cleared_amount >= 0),
    ADD COLUMN cleared_by text,
    ADD CONSTRAINT credit_grant_remaining_within_amount CHECK (remaining <= amount);

-- Apple's share of a prorated refund (milliunits, 50000 = 50%).
ALTER TABLE apple_transaction ADD COLUMN revocation_percentage integer;

-- Existing grants become lots. What each lot could still hold is its amount less what a refund
-- took or found spent; the balance of a pool is spread over its lots newest first (usage burned
-- the oldest first), so each pool's lots add up to its balance.
UPDATE credit_grant SET revoked = true WHERE revoked_amount > 0 OR unrecoverable_amount > 0;
WITH lot AS (
    SELECT g.id, g.user_id, g.pool, greatest(0, g.amount - g.revoked_amount - g.unrecoverable_amount) AS capacity
      FROM credit_grant g
), spread AS (
    SELECT l.id, l.capacity,
           coalesce(sum(l.capacity) OVER (PARTITION BY l.user_id, l.pool ORDER BY l.id DESC
                                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS newer,
           coalesce(a.balance, 0) AS balance
      FROM lot l LEFT JOIN credit_account a ON a.user_id = l.user_id AND a.pool = l.pool
)
UPDATE credit_grant g SET remaining = least(s.capacity, greatest(0, s.balance - s.newer))
  FROM spread s
 WHERE g.id = s.id;
-- A balance its grants cannot explain (none known today) becomes one lot of its own, so that
-- nothing is lost and the sums hold.
INSERT INTO credit_grant (grant_key, user_id, pool, amount, remaining, reason)
SELECT 'lots:' || a.user_id || ':' || a.pool, a.user_id, a.pool, a.balance - coalesce(s.total, 0),
       a.balance - coalesce(s.total, 0), 'MIGRATION'
  FROM credit_account a
  LEFT JOIN (SELECT user_id, pool, sum(remaining) AS total FROM credit_grant GROUP BY user_id, pool) s USING (user_id, pool)
 WHERE a.balance > coalesce(s.total, 0);

-- The period grants of a chain, which a plan change's grant reads (FulfillmentPlanner.grants).
CREATE INDEX credit_grant_chain_idx ON credit_grant (environment, original_transaction_id)
    WHERE original_transaction_id IS NOT NULL;

-- The lots usage burns, in the order it burns them.
CREATE INDEX credit_grant_lot_idx ON credit_grant (user_id, pool, id) WHERE remaining > 0;

-- Burns `p_amount` from a user's lots of one pool, the lot granted first first (CreditRules.burn is
-- the same rule). The caller holds the pool's credit_account row locked: every writer of lots locks
-- the account first, then the lots. A loop of index lookups (a user holds a few lots with something
-- left): one UPDATE joining a windowed subquery let the generic plan scan the table, and the daily
-- close of 100,000 users took twice as long. PL/pgSQL keeps the statements prepared for the session.
CREATE FUNCTION credit_burn_lots(p_user text, p_pool text, p_amount bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    lot record;
    left_over bigint := p_amount;
BEGIN
    IF p_amount <= 0 THEN
        RETURN;
    END IF;
    FOR lot IN SELECT c.id, c.remaining FROM credit_grant c
                WHERE c.user_id = p_user AND c.pool = p_pool AND c.remaining > 0 ORDER BY c.id LOOP
        UPDATE credit_grant SET remaining = remaining - least(lot.remaining, left_over) WHERE id = lot.id;
        left_over := left_over - least(lot.remaining, left_over);
        EXIT WHEN left_over = 0;
    END LOOP;
END
$$;

-- credit_charge_usage of migration 0018, burning the lots of each pool it draws from.
CREATE OR REPLACE FUNCTION credit_charge_usage(
    p_service text, p_key text, p_user text, p_units bigint, p_rate text, p_requested timestamptz,
    p_occurred timestamptz, p_today date, p_max_cost bigint, p_occurred_text text,
    OUT stored text, OUT same boolean, OUT version integer, OUT per_unit bigint, OUT available bigint,
    OUT response text)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    cost bigint;
    balance_s bigint;
    spendable_s bigint;
    balance_w bigint;
    balance_p bigint;
    take_s bigint;
    take_w bigint;
    take_p bigint;
    bill_day date;
    usage_id bigint;
    after bigint;
BEGIN
    SELECT e.response, (e.user_id = p_user AND e.units = p_units AND e.rate_code = p_rate
                        AND e.requested_at IS NOT DISTINCT FROM p_requested), r.version, r.micro_credits_per_unit
      INTO stored, same, version, per_unit
      FROM (SELECT 1) AS one
      LEFT JOIN credit_usage_event e ON e.service = p_service AND e.idempotency_key = p_key
      LEFT JOIN LATERAL (SELECT rv.version, rv.micro_credits_per_unit FROM credit_rate_version rv
                          WHERE rv.code = p_rate AND rv.effective_from <= p_occurred
                          ORDER BY rv.effective_from DESC LIMIT 1) r ON true;
    IF stored IS NOT NULL OR per_unit IS NULL OR p_units::numeric * per_unit NOT BETWEEN 1 AND p_max_cost THEN
        RETURN;
    END IF;
    cost := p_units * per_unit;

    SELECT coalesce(max(a.balance) FILTER (WHERE a.pool = 'SUBSCRIPTION'), 0),
           coalesce(max(a.balance) FILTER (WHERE a.pool = 'WELCOME'), 0),
           coalesce(max(a.balance) FILTER (WHERE a.pool = 'PERMANENT'), 0)
      INTO balance_s, balance_w, balance_p
      FROM (SELECT ca.pool, ca.balance FROM credit_account ca WHERE ca.user_id = p_user ORDER BY ca.pool FOR UPDATE) a;
    spendable_s := CASE WHEN balance_s > 0 AND NOT credit_subscription_spendable(p_user) THEN 0 ELSE balance_s END;
    available := least(spendable_s::numeric + balance_w + balance_p, 9223372036854775807);
    IF available < cost THEN
        RETURN;
    END IF;
    take_s := least(spendable_s, cost);
    take_w := least(balance_w, cost - take_s);
    take_p := cost - take_s - take_w;

    -- Today's bill is there after the user's first call of the day: a plain update then, without
    -- the speculative insertion (and tuple lock) of an upsert.
    UPDATE credit_daily_bill b SET total_cost = b.total_cost + cost
     WHERE b.user_id = p_user AND b.day = p_today AND b.closed_at IS NULL
    RETURNING b.day INTO bill_day;
    IF NOT FOUND THEN
        INSERT INTO credit_daily_bill AS b (user_id, day, total_cost) VALUES (p_user, p_today, cost)
        ON CONFLICT (user_id, day) DO UPDATE SET total_cost = b.total_cost + EXCLUDED.total_cost WHERE b.closed_at IS NULL
        RETURNING b.day INTO bill_day;
    END IF;
    IF NOT FOUND THEN
        INSERT INTO credit_daily_bill AS b (user_id, day, total_cost) VALUES (p_user, p_today + 1, cost)
        ON CONFLICT (user_id, day) DO UPDATE SET total_cost = b.total_cost + EXCLUDED.total_cost WHERE b.closed_at IS NULL
        RETURNING b.day INTO bill_day;
        IF NOT FOUND THEN
            -- Both days closed already: nothing was changed, and no answer means "not charged".
            RETURN;
        END IF;
    END IF;

    usage_id := nextval('credit_usage_event_id_seq');
    WITH taken AS (
        UPDATE credit_account a
           SET balance = a.balance - CASE a.pool WHEN 'SUBSCRIPTION' THEN take_s WHEN 'WELCOME' THEN take_w ELSE take_p END,
               updated_at = now()
         WHERE a.user_id = p_user
           AND a.pool = ANY (ARRAY[CASE WHEN take_p > 0 THEN 'PERMANENT' END, CASE WHEN take_s > 0 THEN 'SUBSCRIPTION' END,
                                   CASE WHEN take_w > 0 THEN 'WELCOME' END])
        RETURNING a.pool, a.balance
    )
    INSERT INTO credit_ledger (user_id, pool, delta, balance_after, entry_type, reference)
    SELECT p_user, t.pool, -CASE t.pool WHEN 'SUBSCRIPTION' THEN take_s WHEN 'WELCOME' THEN take_w ELSE take_p END,
           t.balance, 'USAGE', 'usage:' || usage_id
      FROM taken t ORDER BY t.pool;
    PERFORM credit_burn_lots(p_user, 'SUBSCRIPTION', take_s);
    PERFORM credit_burn_lots(p_user, 'WELCOME', take_w);
    PERFORM credit_burn_lots(p_user, 'PERMANENT', take_p);

    after := least(balance_s::numeric + balance_w + balance_p - cost, 9223372036854775807);
    INSERT INTO credit_usage_event (
        id, service, idempotency_key, user_id, units, rate_code, rate_version, cost, requested_at, occurred_at,
        bill_day, response)
    VALUES (usage_id, p_service, p_key, p_user, p_units, p_rate, version, cost, p_requested, p_occurred, bill_day, format(
        '{"balance":{"creditsBalance":%s,"microCredits":%s,"pools":{"permanent":"%s","subscription":"%s",'
        '"welcome":"%s"}},"billDay":"%s","cost":"%s","costMicroCredits":%s,"drawn":{"permanent":"%s",'
        '"subscription":"%s","welcome":"%s"},"idempotencyKey":%s,"occurredAt":"%s","rate":%s,"rateVersion":%s,'
        '"units":%s,"usageId":%s,"userId":%s}',
        after / 1000000, after, credit_decimal(balance_p - take_p), credit_decimal(balance_s - take_s),
        credit_decimal(balance_w - take_w), to_char(bill_day, 'YYYY-MM-DD'), credit_decimal(cost), cost,
        credit_decimal(take_p), credit_decimal(take_s), credit_decimal(take_w), to_json(p_key), p_occurred_text,
        to_json(p_rate), version, p_units, usage_id, to_json(p_user)))
    RETURNING credit_usage_event.response INTO response;
END
$$;
