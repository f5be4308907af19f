-- RESCIND_CONSENT names the Apple Account (its appTransactionId), not a transaction: the accounts
-- of ours that Account bought with are found through the transactions it signed. A partial index:
-- transactions signed before iOS 18.4 carry none.
ALTER TABLE apple_transaction ADD COLUMN app_transaction_id text;
CREATE INDEX apple_transaction_app_transaction_idx ON apple_transaction (environment, app_transaction_id)
    WHERE app_transaction_id IS NOT NULL;

-- When a parent's withdrawn consent (RESCIND_CONSENT) turned the user's entitlements off.
ALTER TABLE app_user ADD COLUMN consent_rescinded_at timestamptz;
