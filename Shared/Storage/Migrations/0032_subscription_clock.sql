-- The clock drives state. A row was recomputed only when a fact arrived, so a period that ended
-- between facts kept its stored ACTIVE (REST, entitlements and spending read it) until Apple spoke
-- again, sometimes never. A row now keeps the facts that decide its status at any instant
-- (Apple's grace date whenever given, the billing retry, auto-renew) and the next moment its status
-- changes by the clock alone: the clock job advances due rows, and every reader asks
-- subscription_status_at for the status at its own instant in between.
ALTER TABLE user_subscription
    ADD COLUMN in_billing_retry boolean NOT NULL DEFAULT false,
    ADD COLUMN next_change_at timestamptz;

-- The clock job's search: due rows only (frozen chains are left to operators).
CREATE INDEX user_subscription_next_change_idx ON user_subscription (next_change_at)
    WHERE next_change_at IS NOT NULL AND frozen_reason IS NULL;

-- A row's status at p_at: the stored status until its next change, then the rule (the same as
-- SubscriptionTimeline.status(at:) in Swift, tested against it). 1440 hours, not 60 days: an
-- interval of days follows the session's time zone across daylight saving.
CREATE FUNCTION subscription_status_at(
    p_status text, p_next timestamptz, p_expires timestamptz, p_grace timestamptz, p_retry boolean,
    p_auto_renew boolean, p_at timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN p_next IS NULL OR p_at < p_next OR p_status = 'REVOKED' THEN p_status
        WHEN p_expires IS NULL OR p_at < p_expires THEN 'ACTIVE'
        WHEN NOT p_auto_renew THEN 'EXPIRED'
        WHEN p_grace > p_at THEN 'GRACE'
        WHEN p_retry AND p_at < p_expires + interval '1440 hours' THEN 'BILLING_RETRY'
        ELSE 'EXPIRED'
    END
$$;

-- Spending decides on the status at the call's instant, not on the stored one (migration 0018's
-- rule otherwise).
CREATE OR REPLACE FUNCTION credit_subscription_spendable(p_user text) RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT NOT EXISTS (SELECT 1 FROM user_subscription s WHERE s.user_id = p_user)
        OR EXISTS (SELECT 1 FROM user_subscription s
                     CROSS JOIN LATERAL (SELECT subscription_status_at(
                         s.status, s.next_change_at, s.expires_at, s.grace_expires_at, s.in_billing_retry,
                         s.auto_renew_enabled, now()) AS status) n
                    WHERE s.user_id = p_user
                      AND (n.status IN ('ACTIVE', 'GRACE')
                           OR n.status = 'BILLING_RETRY'
                              AND EXISTS (SELECT 1 FROM payment_product p
                                           WHERE p.product_id = s.active_product_id AND p.billing_retry_spends_credits
                                             AND NOT p.deleted)))
$$;

-- The facts of the rows already there, from their renewal infos; every row that may still change
-- by the clock is due at once, so the clock job recomputes it (and readers apply the rule) from now on.
UPDATE user_subscription s
   SET in_billing_retry = r.is_in_billing_retry AND s.status <> 'REVOKED'
                          AND r.signed_date >= coalesce((SELECT t.purchase_date FROM apple_transaction t
                                                          WHERE t.environment = s.environment
                                                            AND t.transaction_id = s.last_transaction_id), '-infinity'),
       grace_expires_at = CASE WHEN r.grace_period_expires_at > s.expires_at AND s.auto_renew_enabled
                                    AND s.status <> 'REVOKED' THEN r.grace_period_expires_at END
  FROM apple_renewal_info r
 WHERE r.environment = s.environment AND r.original_transaction_id = s.original_transaction_id;
UPDATE user_subscription SET next_change_at = now()
 WHERE status IN ('ACTIVE', 'GRACE', 'BILLING_RETRY') AND expires_at IS NOT NULL;
