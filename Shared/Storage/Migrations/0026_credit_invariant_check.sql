-- The ledger invariant check reads every account, ledger entry and lot: 8 s of one core on a
-- database of 2,000,000 grants. Each worker ran it at its start and every
-- CREDITS_INVARIANT_INTERVAL_SECONDS, so N workers (and every rolling restart) repeated it N
-- times. One row now holds when it last ran and what it found: the worker that claims the row
-- once the interval has passed runs it, and every worker reports the stored result.
CREATE TABLE credit_invariant_check (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    checked_at  timestamptz NOT NULL DEFAULT '-infinity',
    violations  integer NOT NULL DEFAULT 0
);
INSERT INTO credit_invariant_check DEFAULT VALUES;
