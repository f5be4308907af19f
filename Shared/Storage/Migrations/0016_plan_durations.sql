-- Durations as App Store Connect lists them (ISO 8601): weekly, 2-, 3- and 6-month plans join the
-- monthly and yearly ones, whose old spellings become P1M and P1Y (catalogue files may still say
-- MONTH and YEAR; the parser maps them, so the table holds one spelling).
ALTER TABLE payment_product DROP CONSTRAINT payment_product_duration_check;
UPDATE payment_product SET duration = CASE duration WHEN 'MONTH' THEN 'P1M' WHEN 'YEAR' THEN 'P1Y' ELSE duration END;
ALTER TABLE payment_product ADD CONSTRAINT payment_product_duration_check
    CHECK (duration IN ('P1W', 'P1M', 'P2M', 'P3M', 'P6M', 'P1Y'));
