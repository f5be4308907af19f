-- Orders end FAILED only with their stable code (Domain's OrderFailureCode), and only a FAILED
-- order has one. The release before never wrote FAILED or a failure code (its fulfilment clears
-- the column), so its writes satisfy the constraint; VALIDATE takes no lock that blocks writes.
ALTER TABLE payment_order ADD CONSTRAINT payment_order_failure_code_check
    CHECK ((status = 'FAILED') = (failure_code IS NOT NULL)) NOT VALID;
ALTER TABLE payment_order VALIDATE CONSTRAINT payment_order_failure_code_check;

-- The console's home page lists the account conflicts still open (their chain frozen) at every
-- visit: a partial index keeps that read to the account.conflict events, however many others the
-- outbox holds. A large outbox: create it by hand first with CONCURRENTLY (deploy/UPGRADING.md rule 4).
CREATE INDEX IF NOT EXISTS outbound_event_account_conflict_idx ON outbound_event (created_at)
    WHERE type = 'account.conflict';
