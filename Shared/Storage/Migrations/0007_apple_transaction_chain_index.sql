-- The chain index leads with the original transaction id instead of the environment, so that only
-- the unique (environment, transaction_id) key begins with the environment. With both leading with
-- it, the generic plan a worker's prepared statement built on a young database (tables nearly
-- empty, not yet analyzed) looked a transaction up through the chain index on the environment
-- alone, filtering every transaction of the environment, and kept doing so as the table grew:
-- ~1,400 of the ~1,500 buffers each event read in the fulfillment throughput benchmark.
CREATE INDEX apple_transaction_chain_by_original_idx ON apple_transaction (original_transaction_id, environment);
DROP INDEX apple_transaction_chain_idx;
