-- Retention Messaging: a rule may suggest switching to another product of the subscription group
-- (Apple's `alternateProduct`, a switch-plan message). The answer names that product, so the
-- record keeps it beside the message, as it keeps a promotional offer's identifier.
--
-- The checks are added NOT VALID: they hold for every new row at once, and no existing row can
-- break them (the old check allowed fewer answers, the new column is empty), so the table, one row
-- per Apple request, is not scanned under its exclusive lock.
ALTER TABLE retention_message_answer
    ADD COLUMN alternate_product_id text,
    DROP CONSTRAINT retention_message_answer_answer_check,
    ADD CONSTRAINT retention_message_answer_answer_check
        CHECK (answer IN ('MESSAGE', 'PROMOTIONAL_OFFER', 'ALTERNATE_PRODUCT', 'DEFAULT')) NOT VALID,
    ADD CONSTRAINT retention_message_answer_alternate_check
        CHECK ((answer = 'ALTERNATE_PRODUCT') = (alternate_product_id IS NOT NULL)) NOT VALID;
