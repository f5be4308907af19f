import Domain
import Foundation
import Postgres
import ServiceRuntime
import Storage

extension CreditJobs {
    /// Clears the SUBSCRIPTION pool of users whose subscription truly ended (EXPIRED or REVOKED;
    /// not auto-renew off, not grace, not billing retry) before `now`'s UTC day began, i.e. at the
    /// first UTC midnight after the later of its expiry and the moment it was known to have ended.
    /// A user entitled again by then (any chain ACTIVE, GRACE or BILLING_RETRY) keeps the pool.
    /// Each ending is handled once. Returns the number of pools cleared.
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
        if cleared > 0 { logger.info("expired subscription pools cleared", ["credits.pools_cleared": .int(Int64(cleared))]) }
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
    private static let dueEndings: StaticString = """
        SELECT s.user_id, s.environment, s.original_transaction_id, s.last_transaction_id, s.status
          FROM user_subscription s
         WHERE s.status IN ('EXPIRED', 'REVOKED') AND s.cleared_ending IS DISTINCT FROM s.last_transaction_id || ':' || s.status
           AND greatest(s.expires_at, s.grace_expires_at,
                        coalesce((SELECT max(h.created_at) FROM status_history h
                                   WHERE h.entity_type = 'SUBSCRIPTION'
                                     AND h.entity_key = s.environment || ':' || s.original_transaction_id
                                     AND h.current_status = s.status), s.updated_at)) < $1
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
        // Lock the pools first, then read the subscriptions again: a fulfillment that makes the user
        // entitled again either committed before (seen here) or grants after this clears.
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
                    SELECT d.*, EXISTS (SELECT 1 FROM user_subscription e WHERE e.user_id = d.user_id
                                           AND e.status IN ('ACTIVE', 'GRACE', 'BILLING_RETRY')) AS entitled
                      FROM (\(Self.dueEndings)) d WHERE d.user_id = ANY($2::text[])
                    """,
                binds: [startOfToday.postgresData, PostgresArray(users).postgresData]))
        var handled = Endings()
        var entries = LedgerEntries()
        var clearedUsers: Set<String> = []
        var clearedBy: [String: String] = [:]
        for row in endings {
            let user: String = try row.decode("user_id")
            let entitled: Bool = try row.decode("entitled")
            let environment: String = try row.decode("environment")
            let original: String = try row.decode("original_transaction_id")
            let last: String = try row.decode("last_transaction_id")
            var amount: MicroCredits = 0
            if !entitled, !clearedUsers.contains(user), let balance = balances[user], balance > 0 {
                amount = balance
                clearedBy[user] = CreditRules.endingKey(
                    environment: environment, originalTransactionID: original, lastTransactionID: last,
                    status: try row.decode("status"))
                entries.append(
                    user: user, pool: .subscription, delta: -balance, after: 0, type: "EXPIRY_CLEARING",
                    reference: "expiry:\(environment):\(original):\(last)")
            }
            if !entitled { clearedUsers.insert(user) }
            handled.append(
                environment: environment, original: original, last: last, status: try row.decode("status"),
                user: user, amount: amount)
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
        try await ledger.clearSubscriptionPools(endings: clearedBy, entries: entries, on: db)
        return (handled, clearedBy.count)
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
