-- Finish Transaction (App Store Server API 1.20): with APPLE_FINISH_TRANSACTIONS on, the apply that
-- delivers a transaction queues a FINISH_TRANSACTION task in its own transaction, so the call to
-- Apple happens after the commit, under a lease, with the retries of every other task.
ALTER TABLE fulfillment_task ADD COLUMN transaction_id text;
ALTER TABLE fulfillment_task DROP CONSTRAINT fulfillment_task_kind_check;
ALTER TABLE fulfillment_task ADD CONSTRAINT fulfillment_task_kind_check
    CHECK (kind IN ('REQUERY', 'RECOVERY', 'SET_APP_ACCOUNT_TOKEN', 'IMPORT', 'FINISH_TRANSACTION'));
ALTER TABLE fulfillment_task ADD CONSTRAINT fulfillment_task_finish
    CHECK ((kind = 'FINISH_TRANSACTION') = (transaction_id IS NOT NULL));
-- Once per transaction, whatever the status: a redelivered or replayed fact asks for nothing more.
CREATE UNIQUE INDEX fulfillment_task_finish_once ON fulfillment_task (environment, transaction_id)
    WHERE kind = 'FINISH_TRANSACTION';
-- One row per delivered transaction would grow without end: finished ones are deleted after
-- APPLE_FINISH_TRANSACTIONS_KEEP_DAYS, oldest first.
CREATE INDEX fulfillment_task_finish_done_idx ON fulfillment_task (completed_at)
    WHERE kind = 'FINISH_TRANSACTION' AND status = 'DONE';
