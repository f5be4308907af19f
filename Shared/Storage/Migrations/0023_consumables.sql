-- Consumables: credit packs in the catalogue. A CONSUMABLE product grants `permanent_credits`
-- whole PERMANENT credits once per purchase (its transaction); it has no group, level or
-- duration (stored as '', 1 and 'P1M', which nothing reads for it). Subscriptions are
-- AUTO_RENEWABLE, the default.
ALTER TABLE payment_product
    ADD COLUMN kind text NOT NULL DEFAULT 'AUTO_RENEWABLE' CHECK (kind IN ('AUTO_RENEWABLE', 'CONSUMABLE')),
    ADD COLUMN permanent_credits bigint NOT NULL DEFAULT 0 CHECK (permanent_credits >= 0);
