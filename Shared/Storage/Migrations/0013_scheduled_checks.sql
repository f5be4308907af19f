-- Checking Apple on a schedule: the hourly pull of the deliveries Apple failed is a recovery that
-- asks only for those (Get Notification History's onlyFailures), and the daily re-query looks for
-- chains that passed their expiry with auto-renew on and no word from Apple since.
ALTER TABLE fulfillment_task ADD COLUMN only_failures boolean NOT NULL DEFAULT false;

-- Chains by expiry, for the lapsed-chain scan (frozen chains are left to operators).
CREATE INDEX user_subscription_expiry_idx ON user_subscription (expires_at) WHERE frozen_reason IS NULL;
