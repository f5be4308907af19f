-- The expiry clearing (and its overdue gauge, sampled every METRICS_SAMPLE_SECONDS) looked for
-- endings not handled yet among every chain that ever ended: its cost grew with the history of
-- churn (265 ms a sample for 50,000 ended chains). A chain now remembers which of its endings was
-- handled (`last_transaction_id:status`); the index holds only the endings not handled yet, and a
-- chain that ends again (another transaction, another status) is back in it by itself. The
-- clearing rows stay the record: the marker only narrows the search.
ALTER TABLE user_subscription ADD COLUMN cleared_ending text;
UPDATE user_subscription s SET cleared_ending = c.last_transaction_id || ':' || c.status
  FROM credit_expiry_clearing c
 WHERE c.environment = s.environment AND c.original_transaction_id = s.original_transaction_id
   AND c.last_transaction_id = s.last_transaction_id AND c.status = s.status;
DROP INDEX user_subscription_ended_idx;
CREATE INDEX user_subscription_uncleared_ending_idx ON user_subscription (user_id)
    WHERE status IN ('EXPIRED', 'REVOKED') AND cleared_ending IS DISTINCT FROM last_transaction_id || ':' || status;
