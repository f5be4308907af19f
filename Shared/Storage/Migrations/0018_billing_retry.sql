-- Billing retry: Apple keeps trying to charge for up to 60 days, and the seed stops paid service
-- meanwhile, so the SUBSCRIPTION pool is not spendable while the user has no entitled chain
-- (ACTIVE or GRACE); usage then draws WELCOME and PERMANENT only, or is refused. A product may
-- allow spending during its retry (billing_retry_spends_credits). The pool itself is kept (Apple
-- may still recover) and cleared at true expiry as before. A user without any chain keeps what an
-- operator credited to the pool: there is no subscription to wait for. CreditRules.subscriptionSpendable
-- is the same rule in Swift.
ALTER TABLE payment_product ADD COLUMN billing_retry_spends_credits boolean NOT NULL DEFAULT false;

CREATE FUNCTION credit_subscription_spendable(p_user text) RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT NOT EXISTS (SELECT 1 FROM user_subscription s WHERE s.user_id = p_user)
        OR EXISTS (SELECT 1 FROM user_subscription s
                    WHERE s.user_id = p_user
                      AND (s.status IN ('ACTIVE', 'GRACE')
                           OR s.status = 'BILLING_RETRY'
                              AND EXISTS (SELECT 1 FROM payment_product p
                                           WHERE p.product_id = s.active_product_id AND p.billing_retry_spends_credits
                                             AND NOT p.deleted)))
$$;

-- credit_charge_usage of migration 0008, drawing the SUBSCRIPTION pool only when it is spendable.
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
