-- Usage calls charged in batches (the ingress gathers concurrent calls; CreditMeter.use(batch:)
-- calls this): one round trip and one commit for the whole batch. The cost of a call was mostly
-- per statement sent and per transaction (protocol, executor start, commit and WAL flush, the
-- switches between ingress and server), not per row.
--
-- Arrays, one element per call (as the arguments of credit_charge_usage), and one row per call in
-- the same order with the columns of credit_charge_usage. The calls are charged one after the
-- other by credit_charge_usage itself, so two calls of one user or one key in a batch end exactly
-- as if sent one after the other (the second sees the first's debit, or its stored answer), and
-- the rules exist once. Refusals are rows like any other; only an unexpected error (a deadlock, a
-- key a concurrent transaction stored first) fails the batch, whose calls the caller then sends
-- alone.
--
-- Lock order: every account the batch may touch is locked first, all at once and sorted by user
-- then pool, as the daily close locks its users' accounts (CreditJobs.closeBatch), and only then
-- any bill. Locking each user's accounts as its calls come would take users in call order, and
-- two batches (or a batch and the close) holding users in opposite orders would deadlock.
CREATE FUNCTION credit_charge_usage_batch(
    p_services text[], p_keys text[], p_users text[], p_units bigint[], p_rates text[], p_requested timestamptz[],
    p_occurred timestamptz[], p_today date[], p_max_cost bigint, p_occurred_text text[])
RETURNS TABLE (stored text, same boolean, version integer, per_unit bigint, available bigint, response text)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM FROM credit_account a WHERE a.user_id = ANY (p_users) ORDER BY a.user_id, a.pool FOR UPDATE;
    FOR i IN 1 .. cardinality(p_keys) LOOP
        SELECT c.stored, c.same, c.version, c.per_unit, c.available, c.response
          INTO stored, same, version, per_unit, available, response
          FROM credit_charge_usage(p_services[i], p_keys[i], p_users[i], p_units[i], p_rates[i], p_requested[i],
                                   p_occurred[i], p_today[i], p_max_cost, p_occurred_text[i]) c;
        RETURN NEXT;
    END LOOP;
END
$$;

-- A usage event is stored only after its user's accounts were debited, so its user exists (the
-- accounts reference app_user, and users are never deleted): the foreign key only checked it
-- again for every call, with a key-share lock on the user's row, ~8% of a batched call's server
-- CPU.
ALTER TABLE credit_usage_event DROP CONSTRAINT credit_usage_event_user_id_fkey;
