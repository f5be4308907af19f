-- The console's home page counts and lists the DEAD webhook deliveries at every visit: without an
-- index of their own that is a scan of every delivery ever made. DEAD rows are few (an alert fires
-- when they rise), so a partial index stays small; newest first, as the page lists them.
CREATE INDEX webhook_delivery_dead_idx ON webhook_delivery (seq DESC) WHERE status = 'DEAD';
