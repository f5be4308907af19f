import Domain
import Foundation
import Postgres
import ServiceRuntime
import Storage

extension CreditJobs {
    /// Clears the SUBSCRIPTION lots of chains that truly ended (EXPIRED or REVOKED; not auto-renew
    /// off, not grace, not billing retry) before `now`'s UTC day began: an expired chain at the
    /// first UTC midnight after the later of its expiry and the moment it was known to have ended,
    /// a revoked one at the first UTC midnight after its revocation. Each chain clears only its own
    /// lots: the user's other chains (a new subscription, a Sandbox test chain) neither keep an
    /// ended chain's credits nor lose theirs, and lots of no chain (an operator's) stay. Each ending
    /// is handled once, and only together with the clearing of what it owns; a `credits.cleared`
    /// event tells the app. Returns the number of chains whose lots were cleared.
    @discardableResult
    public func clearExpiredPools(now: Date, wait: Bool = true) async throws -> Int {
        let startOfToday = UTCDay(containing: now).start
        var cleared = 0
        while let result = try await batch(wait: wait, { db in try await clearBatch(startOfToday: startOfToday, now: now, on: db) }),
            result.handled.count > 0
        {
            try await markHandled(result.handled)
            cleared += result.cleared
        }
        metrics.poolsCleared.increment(by: cleared)
        if cleared > 0 { logger.info("ended chains' subscription credits cleared", ["credits.pools_cleared": .int(Int64(cleared))]) }
        return cleared
    }

    /// Endings whose clearing fell due at or before `start` (a UTC midnight) and is not done.
    func overdueClearings(before start: Date) async throws -> Int {
        try await pool.query(
            PostgresQuery(unsafeSQL: "SELECT count(*) AS overdue FROM (\(Self.dueEndings)) d", binds: [start.postgresData])
        ).single().decode("overdue")
    }

    /// Endings due for clearing and not handled yet: found through the chains' marks of their
    /// handled ending (an index of the unmarked endings only), checked against the clearing rows.
    /// A revocation is due from its own date (the refunded period's expiry may be weeks later).
    private static let dueEndings: StaticString = """
        SELECT s.user_id, s.environment, s.original_transaction_id, s.last_transaction_id, s.status
          FROM user_subscription s
         WHERE s.status IN ('EXPIRED', 'REVOKED') AND s.cleared_ending IS DISTINCT FROM s.last_transaction_id || ':' || s.status
           AND CASE WHEN s.status = 'REVOKED'
                    THEN coalesce((SELECT t.revocation_date FROM apple_transaction t
                                    WHERE t.environment = s.environment AND t.transaction_id = s.last_transaction_id),
                                  s.updated_at)
                    ELSE greatest(s.expires_at, s.grace_expires_at,
                                  coalesce((SELECT max(h.created_at) FROM status_history h
                                             WHERE h.entity_type = 'SUBSCRIPTION'
                                               AND h.entity_key = s.environment || ':' || s.original_transaction_id
                                               AND h.current_status = s.status), s.updated_at))
               END < $1
           AND NOT EXISTS (SELECT 1 FROM credit_expiry_clearing c
                            WHERE c.environment = s.environment AND c.original_transaction_id = s.original_transaction_id
                              AND c.last_transaction_id = s.last_transaction_id AND c.status = s.status)
        """

    private func clearBatch(startOfToday: Date, now: Date, on db: PostgresConnection) async throws -> (handled: Endings, cleared: Int) {
        let candidates = try await db.query(
            PostgresQuery(
                unsafeSQL: "SELECT DISTINCT user_id FROM (\(Self.dueEndings)) d ORDER BY user_id LIMIT $2",
                binds: [startOfToday.postgresData, configuration.batchSize.postgresData]))
        guard !candidates.isEmpty else { return (Endings(), 0) }
        var users: [String] = []
        for row in candidates { users.append(try row.decode("user_id")) }
        // Lock the pools first, then read the endings and their lots: a fulfillment that renews the
        // chain (a new ending key) or grants to it either committed before (seen here) or after this.
        var balances: [String: MicroCredits] = [:]
        for row in try await db.query(
            """
            SELECT user_id, balance FROM credit_account WHERE pool = 'SUBSCRIPTION' AND user_id = ANY(\(PostgresArray(users))::text[])
             ORDER BY user_id FOR UPDATE
            """)
        {
            balances[try row.decode("user_id")] = try row.decode("balance")
        }
        let endings = try await db.query(
            PostgresQuery(
                unsafeSQL: """
                    SELECT d.*, (SELECT coalesce(sum(g.remaining), 0) FROM credit_grant g
                                  WHERE g.environment = d.environment AND g.original_transaction_id = d.original_transaction_id
                                    AND g.user_id = d.user_id AND g.pool = 'SUBSCRIPTION' AND g.remaining > 0)::bigint AS owned
                      FROM (\(Self.dueEndings)) d WHERE d.user_id = ANY($2::text[])
                     ORDER BY d.user_id, d.environment, d.original_transaction_id
                    """,
                binds: [startOfToday.postgresData, PostgresArray(users).postgresData]))
        var handled = Endings()
        var entries = LedgerEntries()
        var chains = ClearedChains()
        var events: [OutboundEvent] = []
        for row in endings {
            let user: String = try row.decode("user_id")
            let environment: String = try row.decode("environment")
            let original: String = try row.decode("original_transaction_id")
            let last: String = try row.decode("last_transaction_id")
            let status: String = try row.decode("status")
            // The lots add up to the balance (the ledger check says so); the minimum only guards it.
            let amount = min(try row.decode("owned", as: Int64.self), balances[user] ?? 0)
            if amount > 0 {
                let ending = CreditRules.endingKey(
                    environment: environment, originalTransactionID: original, lastTransactionID: last, status: status)
                balances[user, default: 0] -= amount
                chains.append(user: user, environment: environment, original: original, ending: ending, amount: amount)
                entries.append(
                    user: user, pool: .subscription, delta: -amount, after: balances[user, default: 0], type: "EXPIRY_CLEARING",
                    reference: "expiry:\(environment):\(original):\(last)")
                events.append(
                    OutboundEvent(
                        key: "\(OutboundEventType.creditsCleared.rawValue):\(ending)", type: .creditsCleared, userID: user,
                        environment: environment, occurredAt: now,
                        data: [
                            "pool": .string(CreditPool.subscription.rawValue), "amount": .string(CreditAmount.decimal(amount)),
                            "originalTransactionId": .string(original),
                        ]))
            }
            handled.append(environment: environment, original: original, last: last, status: status, user: user, amount: amount)
        }
        try await db.query(
            """
            INSERT INTO credit_expiry_clearing (
                environment, original_transaction_id, last_transaction_id, status, user_id, cleared_amount, cleared_at)
            SELECT *, \(now)::timestamptz
              FROM unnest(\(PostgresArray(handled.environments))::text[], \(PostgresArray(handled.originals))::text[],
                          \(PostgresArray(handled.lasts))::text[], \(PostgresArray(handled.statuses))::text[],
                          \(PostgresArray(handled.users))::text[], \(PostgresArray(handled.amounts))::bigint[])
            ON CONFLICT DO NOTHING
            """)
        try await ledger.clearChainLots(chains, entries: entries, on: db)
        if !events.isEmpty { _ = try await OutboundEventStore(pool: pool).append(events, on: db) }
        return (handled, chains.count)
    }

    /// Marks the chains whose endings a batch handled, after it committed (see `dueEndings`): in
    /// its own statement, so the batch never holds a chain's row while it locks pools (the
    /// fulfillment locks them the other way round). A mark that is lost only leaves the ending to
    /// the clearing rows, which the search still checks.
    private func markHandled(_ endings: Endings) async throws {
        try await pool.withConnection { db in
            try await ChainBindingStore(pool: pool, topic: nil).markEndingsCleared(
                environments: endings.environments, originals: endings.originals, lasts: endings.lasts,
                statuses: endings.statuses, on: db)
        }
    }
}

/// Handled endings to record, as parallel arrays.
private struct Endings {
    var environments: [String] = []
    var originals: [String] = []
    var lasts: [String] = []
    var statuses: [String] = []
    var users: [String] = []
    var amounts: [Int64] = []

    var count: Int { users.count }

    mutating func append(environment: String, original: String, last: String, status: String, user: String, amount: MicroCredits) {
        environments.append(environment)
        originals.append(original)
        lasts.append(last)
        statuses.append(status)
        users.append(user)
        amounts.append(amount)
    }
}

/// Chains whose SUBSCRIPTION lots a batch clears, as parallel arrays.
struct ClearedChains {
    var users: [String] = []
    var environments: [String] = []
    var originals: [String] = []
    var endings: [String] = []
    var amounts: [Int64] = []

    var count: Int { users.count }

    mutating func append(user: String, environment: String, original: String, ending: String, amount: MicroCredits) {
        users.append(user)
        environments.append(environment)
        originals.append(original)
        endings.append(ending)
        amounts.append(amount)
    }
}
