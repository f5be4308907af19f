-- The other tasks go ahead of Finish Transaction: with APPLE_FINISH_TRANSACTIONS on, a peak of
-- renewals queues one FINISH_TRANSACTION per delivery, and taken in due order they would hold back
-- the re-queries and consumption answers (Apple waits 12 hours for those) behind them. The claim
-- looks here first; this index keeps that look from walking past the queued finishes.
CREATE INDEX fulfillment_task_due_first_idx ON fulfillment_task (next_attempt_at, id)
    WHERE status = 'PENDING' AND kind <> 'FINISH_TRANSACTION';
