-- A cancellation inside a 12-month commitment keeps the plan: Apple still takes the remaining
-- monthly charges, so a month's end with auto-renew off is not the plan's end. The row keeps the
-- commitment's end while charges of it remain after the current period (null otherwise), and the
-- status rule treats such a period's end as auto-renew on: it awaits the next charge (grace and
-- billing retry as usual), and the plan ends with the commitment when auto-renew stayed off.
ALTER TABLE user_subscription ADD COLUMN commitment_ends_at timestamptz;

-- The rule of migration 0032 with the commitment (SubscriptionTimeline.status(at:) in Swift,
-- tested against it), under a new signature: this release's callers pass the commitment. The
-- 7-argument form stays as it was for the previous release's pods during a rolling upgrade or
-- after a rollback (deploy/UPGRADING.md, expand then contract); drop it a release later.
CREATE FUNCTION subscription_status_at(
    p_status text, p_next timestamptz, p_expires timestamptz, p_grace timestamptz, p_retry boolean,
    p_auto_renew boolean, p_commitment_ends timestamptz, p_at timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN p_next IS NULL OR p_at < p_next OR p_status = 'REVOKED' THEN p_status
        WHEN p_expires IS NULL OR p_at < p_expires THEN 'ACTIVE'
        WHEN NOT (p_auto_renew OR coalesce(p_expires < p_commitment_ends, false)) THEN 'EXPIRED'
        WHEN p_grace > p_at THEN 'GRACE'
        WHEN p_retry AND p_at < p_expires + interval '1440 hours' THEN 'BILLING_RETRY'
        ELSE 'EXPIRED'
    END
$$;

CREATE OR REPLACE FUNCTION credit_subscription_spendable(p_user text) RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT NOT EXISTS (SELECT 1 FROM user_subscription s WHERE s.user_id = p_user)
        OR EXISTS (SELECT 1 FROM user_subscription s
                     CROSS JOIN LATERAL (SELECT subscription_status_at(
                         s.status, s.next_change_at, s.expires_at, s.grace_expires_at, s.in_billing_retry,
                         s.auto_renew_enabled, s.commitment_ends_at, now()) AS status) n
                    WHERE s.user_id = p_user
                      AND (n.status IN ('ACTIVE', 'GRACE')
                           OR n.status = 'BILLING_RETRY'
                              AND EXISTS (SELECT 1 FROM payment_product p
                                           WHERE p.product_id = s.active_product_id AND p.billing_retry_spends_credits
                                             AND NOT p.deleted)))
$$;

-- Rows already stored: the commitment of their current charge, where charges remain after it
-- (CommitmentRules.remainingChargesEnd); they are due at once, so the clock job recomputes their
-- status and next change with it. The grace date a cancelled row dropped comes back with its
-- chain's next fact.
UPDATE user_subscription s
   SET commitment_ends_at = t.commitment_expires_date, next_change_at = now()
  FROM apple_transaction t
 WHERE t.environment = s.environment AND t.transaction_id = s.last_transaction_id
   AND s.status <> 'REVOKED' AND t.billing_plan_type = 'MONTHLY'
   AND t.expires_date < t.commitment_expires_date
   AND (t.commitment_billing_period IS NULL OR t.commitment_total_periods IS NULL
        OR t.commitment_billing_period < t.commitment_total_periods);

-- Forwarding sends each notification with Apple's exact request body. Apple's body is nearly
-- always the compact {"signedPayload":"…"} the forwarding rebuilds from the stored payload, so the
-- ingress keeps the body (sealed, under the payload's key) only for a forwarded notification whose
-- body differs: the common path writes no second copy of ~10 KB per notification (table and WAL),
-- and a body with other whitespace, member order or extra members is forwarded byte for byte.
-- Redacted with the payload.
ALTER TABLE inbound_event ADD COLUMN request_body bytea;
