-- The refund preference a product's consumption answers carry (Send Consumption Information's
-- refundPreference); null sends none.
ALTER TABLE payment_product ADD COLUMN refund_preference text
    CHECK (refund_preference IN ('DECLINE', 'GRANT_FULL', 'GRANT_PRORATED'));
