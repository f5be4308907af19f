-- The console's home page lists the frozen chains (an operator must act on each) at every visit:
-- a partial index keeps that read to the frozen rows, whatever the number of chains.
CREATE INDEX user_subscription_frozen_idx ON user_subscription (updated_at, id) WHERE frozen_reason IS NOT NULL;
