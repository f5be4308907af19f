-- When an operator last restored a consent that RESCIND_CONSENT had withdrawn (the parent granted
-- it again, or Apple's notification named the wrong account): a RESCIND_CONSENT Apple signed
-- before that instant (a replay of the one the operator answered) no longer turns the account off.
ALTER TABLE app_user ADD COLUMN consent_restored_at timestamptz;
