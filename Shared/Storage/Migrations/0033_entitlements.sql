-- What a catalogue product unlocks (entitlement identifiers the app's code checks). NULL (rows
-- written before this migration, or by hand) unlocks the plan code, as a catalogue naming none
-- does: readers take coalesce(entitlements, ARRAY[plan_code]); catalogue applies write it.
ALTER TABLE payment_product ADD COLUMN entitlements text[];

-- Promotional grants: an operator gives a user an entitlement until expires_at, apart from any
-- purchase (access, not credits). A grant is never deleted: a revocation sets revoked_*, the
-- clock's end sets ended_at (when its entitlement.expired event was written), so the trail stays.
CREATE TABLE entitlement_grant (
    id             bigserial PRIMARY KEY,
    user_id        text NOT NULL REFERENCES app_user (user_id),
    entitlement    text NOT NULL CHECK (entitlement ~ '^[a-z0-9_.-]{1,64}$'),
    -- The deployment's environment when granted: its events carry it.
    environment    text NOT NULL,
    starts_at      timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    reason         text NOT NULL,
    granted_by     text NOT NULL,
    revoked_at     timestamptz,
    revoked_by     text,
    revoke_reason  text,
    ended_at       timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT entitlement_grant_period CHECK (expires_at > starts_at)
);
CREATE INDEX entitlement_grant_user_idx ON entitlement_grant (user_id, entitlement);
-- The clock's work: grants neither revoked nor ended, by when they end.
CREATE INDEX entitlement_grant_due_idx ON entitlement_grant (expires_at) WHERE revoked_at IS NULL AND ended_at IS NULL;
