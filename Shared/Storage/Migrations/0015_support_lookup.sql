-- The support lookup (admin API, `subsctl lookup`): any id a customer or Apple gives leads to its
-- case through an index, whatever the table's size; and the event queue lists by status and code.

-- A transaction id as uploaded by a client or named by a notification, before or without its fact.
CREATE INDEX inbound_event_transaction_idx ON inbound_event (transaction_id) WHERE transaction_id IS NOT NULL;
-- A user's own uploads.
CREATE INDEX inbound_event_submitter_idx ON inbound_event (user_id) WHERE kind = 'submission';
-- The queue: events of one status (and code), newest first.
CREATE INDEX inbound_event_queue_idx ON inbound_event (process_status, error_code, id);
-- The facts' keys lead with the environment; a support id comes without one.
CREATE INDEX apple_transaction_transaction_idx ON apple_transaction (transaction_id);
CREATE INDEX apple_transaction_user_idx ON apple_transaction (user_id) WHERE user_id IS NOT NULL;
CREATE INDEX user_subscription_original_idx ON user_subscription (original_transaction_id);
CREATE INDEX chain_binding_original_idx ON chain_binding (original_transaction_id);
CREATE INDEX payment_order_chain_idx ON payment_order (environment, original_transaction_id)
    WHERE original_transaction_id IS NOT NULL;
CREATE INDEX consumption_answer_user_idx ON consumption_answer (user_id) WHERE user_id IS NOT NULL;
