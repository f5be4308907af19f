-- Offers: how long a pay-up-front or free offer lasts (Apple's offerPeriod, ISO 8601), so one
-- transaction covering several months grants month by month; and per product, whether a free
-- period of a promotional (2), offer-code (3) or win-back (4) offer grants credits (null: as
-- trial_grants_credits says, which decides for introductory free trials).
ALTER TABLE apple_transaction ADD COLUMN offer_period text;
ALTER TABLE payment_product
    ADD COLUMN promotional_free_grants_credits boolean,
    ADD COLUMN offer_code_free_grants_credits boolean,
    ADD COLUMN win_back_free_grants_credits boolean;
