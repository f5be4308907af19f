import Domain
import Foundation
import Postgres
import ServiceRuntime

extension CreditJobs {
    /// Closes every open bill of a day before `now`'s UTC day (so missed days are caught up): the
    /// day's total rounded UP to a whole credit is what it costs; the rounding difference is taken
    /// from the balance (pools in usage order), never below zero, the rest recorded as shortfall.
    /// Returns the number of bills closed.
    @discardableResult
    public func closeDays(now: Date, wait: Bool = true) async throws -> Int {
        let today = UTCDay(containing: now)
        let started = ContinuousClock.now
        var closed = 0
        while let batch = try await batch(wait: wait, { db in try await closeBatch(before: today, now: now, on: db) }),
            batch.handled > 0
        {
            closed += batch.handled - batch.setAside
        }
        metrics.billsClosed.increment(by: closed)
        let open = try await pool.query(
            """
            SELECT count(*) FILTER (WHERE close_failure IS NULL) AS open, count(*) FILTER (WHERE close_failure IS NOT NULL) AS failed
              FROM credit_daily_bill WHERE closed_at IS NULL AND day < \(today.text)::date
            """)
        metrics.openPastBills.set(Double(try open[0].decode("open", as: Int.self)))
        metrics.failedBills.set(Double(try open[0].decode("failed", as: Int.self)))
        if closed > 0 {
            logger.info(
                "daily bills closed",
                ["credits.bills_closed": .int(Int64(closed)), "latency.ms": .int(Int64((ContinuousClock.now - started) / .milliseconds(1)))])
        }
        return closed
    }

    /// Closes a batch of bills; a bill that cannot be settled is set aside with its reason (retried
    /// at the next UTC day's run) and the others of the batch close. Returns the bills handled and
    /// how many of them were set aside.
    private func closeBatch(before today: UTCDay, now: Date, on db: PostgresConnection) async throws -> (handled: Int, setAside: Int) {
        // Accounts before bills, the order of a usage call (which counts a cost into a bill only under
        // its user's account locks): the candidates are read without locks, their users' accounts
        // locked, then the bills read again under those locks, with every cost already counted.
        let candidates = try await db.query(
            """
            SELECT id, user_id FROM credit_daily_bill
             WHERE closed_at IS NULL AND day < \(today.text)::date
               AND (close_failed_at IS NULL OR close_failed_at < \(UTCDay(containing: now).start))
             ORDER BY day, user_id LIMIT \(configuration.batchSize)
            """)
        guard !candidates.isEmpty else { return (0, 0) }
        var ids: [Int64] = []
        var users: Set<String> = []
        for row in candidates {
            ids.append(try row.decode("id"))
            users.insert(try row.decode("user_id"))
        }
        var balances: [String: [CreditPool: MicroCredits]] = [:]
        for row in try await db.query(
            """
            SELECT user_id, pool, balance FROM credit_account WHERE user_id = ANY(\(PostgresArray(Array(users)))::text[])
             ORDER BY user_id, pool FOR UPDATE
            """)
        {
            guard let pool = CreditPool(rawValue: try row.decode("pool")) else { continue }
            balances[try row.decode("user_id"), default: [:]][pool] = try row.decode("balance")
        }
        let bills = try await db.query(
            """
            SELECT id, user_id, (day - date '1970-01-01')::bigint AS day, total_cost FROM credit_daily_bill
             WHERE id = ANY(\(PostgresArray(ids))::bigint[]) AND closed_at IS NULL ORDER BY day, user_id FOR UPDATE
            """)

        var closes = BillCloses()
        var entries = LedgerEntries()
        var changed: Set<Pair> = []
        var burns: [(user: String, pool: CreditPool, amount: MicroCredits)] = []
        var failures: [(id: Int64, user: String, reason: String)] = []
        for row in bills {
            let user: String = try row.decode("user_id")
            let day = UTCDay(index: try row.decode("day"))
            let total: MicroCredits = try row.decode("total_cost")
            guard let (charged, rounding) = CreditRules.dailyCharge(total: total) else {
                failures.append((try row.decode("id"), user, "the day's total \(total) cannot be rounded up within the 64-bit range"))
                continue
            }
            var pools = balances[user] ?? [:]
            let available = Credits.total(pools.values.map { max(0, $0) })
            let drawn = CreditRules.draw(min(rounding, available), from: pools) ?? [:]
            // At most one credit in all, drawn from balances that cover it: no sum here can overflow.
            let settled = Credits.total(drawn.values)
            for pool in CreditPool.allCases {
                guard let amount = drawn[pool], amount > 0 else { continue }
                pools[pool, default: 0] -= amount
                entries.append(
                    user: user, pool: pool, delta: -amount, after: pools[pool]!, type: "DAILY_SETTLEMENT",
                    reference: "daily:\(user):\(day.text)")
                changed.insert(Pair(user: user, pool: pool))
                burns.append((user, pool, amount))
            }
            balances[user] = pools
            closes.append(
                id: try row.decode("id"), charged: charged, rounding: rounding, settled: settled,
                shortfall: rounding - settled)
        }
        if !failures.isEmpty {
            try await db.query(
                """
                UPDATE credit_daily_bill b SET close_failure = f.reason, close_failed_at = \(now)
                  FROM unnest(\(PostgresArray(failures.map(\.id)))::bigint[], \(PostgresArray(failures.map(\.reason)))::text[])
                       AS f(id, reason)
                 WHERE b.id = f.id
                """)
            metrics.billCloseFailures.increment(by: failures.count)
            for failure in failures {
                logger.error(
                    "daily bill set aside: it cannot be settled",
                    ["user.id": .string(failure.user), "credits.bill_id": .int(failure.id), "error.reason": .string(failure.reason)])
            }
        }
        try await db.query(
            """
            UPDATE credit_daily_bill b
               SET charged = c.charged, rounding = c.rounding, settled = c.settled, shortfall = c.shortfall,
                   closed_at = \(now), close_failure = NULL
              FROM unnest(\(PostgresArray(closes.ids))::bigint[], \(PostgresArray(closes.charged))::bigint[],
                          \(PostgresArray(closes.rounding))::bigint[], \(PostgresArray(closes.settled))::bigint[],
                          \(PostgresArray(closes.shortfall))::bigint[]) AS c(id, charged, rounding, settled, shortfall)
             WHERE b.id = c.id
            """)
        let accounts = changed.sorted { ($0.user, $0.pool.rawValue) < ($1.user, $1.pool.rawValue) }.compactMap { pair in
            balances[pair.user]?[pair.pool].map { (pair.user, pair.pool, $0) }
        }
        try await ledger.settle(balances: accounts, burns: burns, entries: entries, on: db)
        return (bills.count, failures.count)
    }
}

/// A user's pool.
private struct Pair: Hashable {
    let user: String
    let pool: CreditPool
}

/// Closed bills to write, as parallel arrays.
private struct BillCloses {
    var ids: [Int64] = []
    var charged: [Int64] = []
    var rounding: [Int64] = []
    var settled: [Int64] = []
    var shortfall: [Int64] = []

    mutating func append(id: Int64, charged: MicroCredits, rounding: MicroCredits, settled: MicroCredits, shortfall: MicroCredits) {
        ids.append(id)
        self.charged.append(charged)
        self.rounding.append(rounding)
        self.settled.append(settled)
        self.shortfall.append(shortfall)
    }
}
