-- Price increases: the renewal info's price at the next renewal (Apple's milliunits) and its
-- currency, so GET /api/v1/subscriptions/current can show it beside priceIncreaseStatus and the
-- app can ask for consent.
ALTER TABLE apple_renewal_info ADD COLUMN renewal_price bigint, ADD COLUMN renewal_currency text;
