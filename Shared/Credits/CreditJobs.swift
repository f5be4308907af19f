import Domain
import Foundation
import Postgres
import ServiceRuntime

/// The credit jobs driven by time: daily close, clearing of expired subscription pools, the
/// monthly grants of yearly plans and welcome credits. Each takes "now" as an argument, so tests
/// and operators run them for any instant; the scheduler passes its clock's.
///
/// Safe with several workers: every batch runs in one transaction that first takes the jobs'
/// transaction advisory lock (so batches of different workers never interleave their row locks),
/// re-checks its rows under the locks the online writers take (accounts before bills, as a usage
/// call), and writes keyed rows (grant keys, one close per bill, one clearing per expiry).
public struct CreditJobs: Sendable {
    public let pool: PostgresPool
    /// `app_key` of the catalogue rows (the bundle id): which product is a yearly plan.
    public let appKey: String
    public let configuration: CreditsConfiguration
    public let logger: Logger
    private let metrics = JobMetrics()

    /// The transaction advisory lock every batch takes (an arbitrary constant of this project).
    static let lockKey: Int64 = 0x0C4E_D175_10B5

    public init(pool: PostgresPool, appKey: String, configuration: CreditsConfiguration, logger: Logger) {
        self.pool = pool
        self.appKey = appKey
        self.configuration = configuration
        self.logger = logger
    }

    /// What one run of every job did.
    public struct Report: Sendable, Hashable {
        public var welcomeGrants = 0
        public var yearlyGrants = 0
        public var billsClosed = 0
        public var poolsCleared = 0
    }

    /// Every job once, in the order that keeps the books right: grants due before the close,
    /// the close before clearing (a day's rounding is settled from the pool it was spent from).
    /// `wait: false` skips a batch another worker is running instead of waiting for it.
    @discardableResult
    public func runAll(now: Date, wait: Bool = true) async throws -> Report {
        var report = Report()
        if configuration.welcomeCredits > 0 { report.welcomeGrants = try await grantWelcomeCredits(wait: wait) }
        report.yearlyGrants = try await grantYearlyMonths(now: now, wait: wait)
        report.billsClosed = try await closeDays(now: now, wait: wait)
        report.poolsCleared = try await clearExpiredPools(now: now, wait: wait)
        return report
    }

    /// Runs `body` in a transaction holding the jobs' lock; nil when `wait` is false and another
    /// worker holds it.
    private func batch<R: Sendable>(wait: Bool, _ body: (PostgresConnection) async throws -> R) async throws -> R? {
        try await pool.transaction { db in
            if wait {
                try await db.query("SELECT pg_advisory_xact_lock(\(Self.lockKey))")
            } else {
                let locked = try await db.query("SELECT pg_try_advisory_xact_lock(\(Self.lockKey)) AS locked")
                guard try locked[0].decode("locked", as: Bool.self) else { return nil }
            }
            return try await body(db)
        }
    }

    /// Runs batches until one does nothing (or the lock is busy); returns the total done.
    private func repeatBatches(wait: Bool, _ body: (PostgresConnection) async throws -> Int) async throws -> Int {
        var total = 0
        while let done = try await batch(wait: wait, body), done > 0 { total += done }
        return total
    }

    // MARK: - Daily close

    /// Closes every open bill of a day before `now`'s UTC day (so missed days are caught up): the
    /// day's total rounded UP to a whole credit is what it costs; the rounding difference is taken
    /// from the balance (pools in usage order), never below zero, the rest recorded as shortfall.
    /// Returns the number of bills closed.
    @discardableResult
    public func closeDays(now: Date, wait: Bool = true) async throws -> Int {
        let today = UTCDay(containing: now)
        let started = ContinuousClock.now
        let closed = try await repeatBatches(wait: wait) { db in try await closeBatch(before: today, now: now, on: db) }
        metrics.billsClosed.increment(by: closed)
        let open = try await pool.query(
            "SELECT count(*) AS open FROM credit_daily_bill WHERE closed_at IS NULL AND day < \(today.text)::date")
        metrics.openPastBills.set(Double(try open[0].decode("open", as: Int.self)))
        if closed > 0 {
            logger.info(
                "daily bills closed",
                ["credits.bills_closed": .int(Int64(closed)), "latency.ms": .int(Int64((ContinuousClock.now - started) / .milliseconds(1)))])
        }
        return closed
    }

    private func closeBatch(before today: UTCDay, now: Date, on db: PostgresConnection) async throws -> Int {
        // Accounts before bills, the order of a usage call (which counts a cost into a bill only under
        // its user's account locks): the candidates are read without locks, their users' accounts
        // locked, then the bills read again under those locks, with every cost already counted.
        let candidates = try await db.query(
            """
            SELECT id, user_id FROM credit_daily_bill
             WHERE closed_at IS NULL AND day < \(today.text)::date ORDER BY day, user_id LIMIT \(configuration.batchSize)
            """)
        guard !candidates.isEmpty else { return 0 }
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
        for row in bills {
            let user: String = try row.decode("user_id")
            let day = UTCDay(index: try row.decode("day"))
            let (charged, rounding) = CreditRules.dailyCharge(total: try row.decode("total_cost"))
            var pools = balances[user] ?? [:]
            let available = pools.values.reduce(0, +)
            let drawn = CreditRules.draw(min(rounding, available), from: pools) ?? [:]
            let settled = drawn.values.reduce(0, +)
            for pool in CreditPool.allCases {
                guard let amount = drawn[pool], amount > 0 else { continue }
                pools[pool, default: 0] -= amount
                entries.append(
                    user: user, pool: pool, delta: -amount, after: pools[pool]!, type: "DAILY_SETTLEMENT",
                    reference: "daily:\(user):\(day.text)")
                changed.insert(Pair(user: user, pool: pool))
            }
            balances[user] = pools
            closes.append(
                id: try row.decode("id"), charged: charged, rounding: rounding, settled: settled,
                shortfall: rounding - settled)
        }
        let accounts = changed.sorted { ($0.user, $0.pool.rawValue) < ($1.user, $1.pool.rawValue) }
        try await db.query(
            """
            WITH bills AS (
                UPDATE credit_daily_bill b
                   SET charged = c.charged, rounding = c.rounding, settled = c.settled, shortfall = c.shortfall,
                       closed_at = \(now)
                  FROM unnest(\(PostgresArray(closes.ids))::bigint[], \(PostgresArray(closes.charged))::bigint[],
                              \(PostgresArray(closes.rounding))::bigint[], \(PostgresArray(closes.settled))::bigint[],
                              \(PostgresArray(closes.shortfall))::bigint[]) AS c(id, charged, rounding, settled, shortfall)
                 WHERE b.id = c.id
            ), accounts AS (
                UPDATE credit_account a SET balance = n.balance, updated_at = now()
                  FROM unnest(\(PostgresArray(accounts.map(\.user)))::text[],
                              \(PostgresArray(accounts.map(\.pool.rawValue)))::text[],
                              \(PostgresArray(accounts.map { balances[$0.user]![$0.pool]! }))::bigint[]) AS n(user_id, pool, balance)
                 WHERE a.user_id = n.user_id AND a.pool = n.pool
            )
            SELECT 1
            """)
        try await entries.insert(on: db)
        return bills.count
    }

    // MARK: - Expired subscription pools

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
            result.handled > 0
        {
            cleared += result.cleared
        }
        metrics.poolsCleared.increment(by: cleared)
        if cleared > 0 { logger.info("expired subscription pools cleared", ["credits.pools_cleared": .int(Int64(cleared))]) }
        return cleared
    }

    /// Endings due for clearing and not handled yet.
    private static let dueEndings: StaticString = """
        SELECT s.user_id, s.environment, s.original_transaction_id, s.last_transaction_id, s.status
          FROM user_subscription s
         WHERE s.status IN ('EXPIRED', 'REVOKED')
           AND greatest(s.expires_at, s.grace_expires_at,
                        coalesce((SELECT max(h.created_at) FROM status_history h
                                   WHERE h.entity_type = 'SUBSCRIPTION'
                                     AND h.entity_key = s.environment || ':' || s.original_transaction_id
                                     AND h.current_status = s.status), s.updated_at)) < $1
           AND NOT EXISTS (SELECT 1 FROM credit_expiry_clearing c
                            WHERE c.environment = s.environment AND c.original_transaction_id = s.original_transaction_id
                              AND c.last_transaction_id = s.last_transaction_id AND c.status = s.status)
        """

    private func clearBatch(startOfToday: Date, now: Date, on db: PostgresConnection) async throws -> (handled: Int, cleared: Int) {
        let candidates = try await db.query(
            PostgresQuery(
                unsafeSQL: "SELECT DISTINCT user_id FROM (\(Self.dueEndings)) d ORDER BY user_id LIMIT $2",
                binds: [startOfToday.postgresData, configuration.batchSize.postgresData]))
        guard !candidates.isEmpty else { return (0, 0) }
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
        for row in endings {
            let user: String = try row.decode("user_id")
            let entitled: Bool = try row.decode("entitled")
            let environment: String = try row.decode("environment")
            let original: String = try row.decode("original_transaction_id")
            let last: String = try row.decode("last_transaction_id")
            var amount: MicroCredits = 0
            if !entitled, !clearedUsers.contains(user), let balance = balances[user], balance > 0 {
                amount = balance
                entries.append(
                    user: user, pool: .subscription, delta: -balance, after: 0, type: "EXPIRY_CLEARING",
                    reference: "expiry:\(environment):\(original):\(last)")
            }
            if !entitled { clearedUsers.insert(user) }
            handled.append(
                environment: environment, original: original, last: last, status: try row.decode("status"),
                user: user, amount: amount)
        }
        let emptied = entries.users
        try await db.query(
            """
            WITH handled AS (
                INSERT INTO credit_expiry_clearing (
                    environment, original_transaction_id, last_transaction_id, status, user_id, cleared_amount, cleared_at)
                SELECT *, \(now)::timestamptz
                  FROM unnest(\(PostgresArray(handled.environments))::text[], \(PostgresArray(handled.originals))::text[],
                              \(PostgresArray(handled.lasts))::text[], \(PostgresArray(handled.statuses))::text[],
                              \(PostgresArray(handled.users))::text[], \(PostgresArray(handled.amounts))::bigint[])
                ON CONFLICT DO NOTHING
            ), emptied AS (
                UPDATE credit_account SET balance = 0, updated_at = now()
                 WHERE pool = 'SUBSCRIPTION' AND user_id = ANY(\(PostgresArray(emptied))::text[])
            )
            SELECT 1
            """)
        try await entries.insert(on: db)
        return (handled.users.count, emptied.count)
    }

    // MARK: - Yearly plans

    /// Grants the months of yearly plans that are due by `now`: month i on the anchor day of the
    /// i-th month after the purchase (UTC, clamped to the month's end), for the 12 months of the
    /// period, while the subscription is ACTIVE or in GRACE and the transaction is not revoked;
    /// only for periods whose first month was granted (trials and family sharing follow the
    /// product's configuration through it). Each month once (its grant key). Returns the number granted.
    @discardableResult
    public func grantYearlyMonths(now: Date, wait: Bool = true) async throws -> Int {
        let candidates = try await pool.query(
            """
            SELECT s.environment, s.original_transaction_id, s.user_id, t.transaction_id, t.purchase_date, t.expires_date,
                   p.credits_amount,
                   (SELECT string_agg(g.grant_key, ',') FROM credit_grant g
                     WHERE g.environment = t.environment AND g.transaction_id = t.transaction_id) AS granted
              FROM user_subscription s
              JOIN apple_transaction t ON t.environment = s.environment AND t.transaction_id = s.last_transaction_id
              JOIN payment_product p ON p.channel = 'APPLE' AND p.app_key = \(appKey) AND p.product_id = t.product_id
             WHERE s.status IN ('ACTIVE', 'GRACE') AND s.frozen_reason IS NULL AND p.duration = 'YEAR'
               AND t.revocation_date IS NULL AND t.purchase_date <= \(now)
               AND (SELECT count(*) FROM credit_grant g
                     WHERE g.environment = t.environment AND g.transaction_id = t.transaction_id) BETWEEN 1 AND 11
            """)
        var granted = 0
        for row in candidates {
            let environment: String = try row.decode("environment")
            let transactionID: String = try row.decode("transaction_id")
            let existing = Set((try row.decode("granted", as: String?.self) ?? "").split(separator: ",").map(String.init))
            guard existing.contains(CreditRules.periodGrantKey(environment: environment, transactionID: transactionID, monthIndex: 0))
            else { continue }
            let dates = CreditRules.yearlyGrantDates(
                purchase: try row.decode("purchase_date"), expires: try row.decode("expires_date", as: Date?.self))
            let amount = Credits.micro(try row.decode("credits_amount"))
            let user: String = try row.decode("user_id")
            let original: String = try row.decode("original_transaction_id")
            let due = dates.enumerated().dropFirst().filter { $0.element <= now }.map { month in
                CreditGrant(
                    userID: user,
                    decision: GrantDecision(
                        grantKey: CreditRules.periodGrantKey(environment: environment, transactionID: transactionID, monthIndex: month.offset),
                        pool: .subscription, amount: amount, reason: "YEARLY_MONTH"),
                    environment: environment, transactionID: transactionID, originalTransactionID: original)
            }.filter { !existing.contains($0.decision.grantKey) }
            guard amount > 0, !due.isEmpty else { continue }
            let booked = try await batch(wait: wait) { db -> Int in
                // The chain lock of fulfillment (same expression): a refund or a plan change of this
                // chain is either seen here or comes after, and then revokes these grants too.
                try await db.query("SELECT pg_advisory_xact_lock(hashtextextended(\(environment)::text || '/' || \(original)::text, 0))")
                let still = try await db.query(
                    """
                    SELECT 1 FROM user_subscription s JOIN apple_transaction t
                        ON t.environment = s.environment AND t.transaction_id = s.last_transaction_id
                     WHERE s.environment = \(environment) AND s.original_transaction_id = \(original)
                       AND s.last_transaction_id = \(transactionID) AND s.status IN ('ACTIVE', 'GRACE')
                       AND s.frozen_reason IS NULL AND t.revocation_date IS NULL
                    """)
                guard !still.isEmpty else { return 0 }
                return try await CreditLedger.grant(due, on: db)
            }
            granted += booked ?? 0
        }
        metrics.yearlyGrants.increment(by: granted)
        if granted > 0 { logger.info("yearly plan months granted", ["credits.grants": .int(Int64(granted))]) }
        return granted
    }

    // MARK: - Welcome credits

    /// Grants `WELCOME_CREDITS` once to every user without them yet (grant key `welcome:<user>`),
    /// into the WELCOME pool. Returns the number granted.
    @discardableResult
    public func grantWelcomeCredits(wait: Bool = true) async throws -> Int {
        let amount = Credits.micro(configuration.welcomeCredits)
        guard amount > 0 else { return 0 }
        let granted = try await repeatBatches(wait: wait) { db in
            let users = try await db.query(
                """
                SELECT u.user_id, 'welcome:' || u.user_id AS grant_key FROM app_user u
                 WHERE NOT EXISTS (SELECT 1 FROM credit_grant g WHERE g.grant_key = 'welcome:' || u.user_id)
                 ORDER BY u.user_id LIMIT \(configuration.batchSize)
                """)
            var grants: [CreditGrant] = []
            for row in users {
                grants.append(
                    CreditGrant(
                        userID: try row.decode("user_id"),
                        decision: GrantDecision(grantKey: try row.decode("grant_key"), pool: .welcome, amount: amount, reason: "WELCOME")))
            }
            return try await CreditLedger.grant(grants, on: db)
        }
        metrics.welcomeGrants.increment(by: granted)
        return granted
    }

    // MARK: - Invariant

    /// Counts the accounts whose balance differs from their ledger (must be 0) and exposes it.
    @discardableResult
    public func checkInvariant() async throws -> Int {
        let violations = try await pool.withConnection { try await CreditLedger.invariantViolations(on: $0) }
        metrics.ledgerMismatches.set(Double(violations))
        if violations > 0 { logger.error("credit balances differ from their ledgers", ["credits.violations": .int(Int64(violations))]) }
        return violations
    }
}

/// A user's pool.
private struct Pair: Hashable {
    let user: String
    let pool: CreditPool
}

/// Ledger rows to insert in one statement, as parallel arrays.
private struct LedgerEntries {
    var userIDs: [String] = []
    var pools: [String] = []
    var deltas: [Int64] = []
    var after: [Int64] = []
    var types: [String] = []
    var references: [String] = []

    mutating func append(user: String, pool: CreditPool, delta: MicroCredits, after balance: MicroCredits, type: String, reference: String) {
        userIDs.append(user)
        pools.append(pool.rawValue)
        deltas.append(delta)
        after.append(balance)
        types.append(type)
        references.append(reference)
    }

    var users: [String] { Array(Set(userIDs)) }

    /// Inserts the entries in order (ids follow the array order).
    func insert(on db: PostgresConnection) async throws {
        guard !userIDs.isEmpty else { return }
        try await db.query(
            """
            INSERT INTO credit_ledger (user_id, pool, delta, balance_after, entry_type, reference)
            SELECT * FROM unnest(\(PostgresArray(userIDs))::text[], \(PostgresArray(pools))::text[],
                                 \(PostgresArray(deltas))::bigint[], \(PostgresArray(after))::bigint[],
                                 \(PostgresArray(types))::text[], \(PostgresArray(references))::text[])
            """)
    }
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

/// Handled endings to record, as parallel arrays.
private struct Endings {
    var environments: [String] = []
    var originals: [String] = []
    var lasts: [String] = []
    var statuses: [String] = []
    var users: [String] = []
    var amounts: [Int64] = []

    mutating func append(environment: String, original: String, last: String, status: String, user: String, amount: MicroCredits) {
        environments.append(environment)
        originals.append(original)
        lasts.append(last)
        statuses.append(status)
        users.append(user)
        amounts.append(amount)
    }
}

/// The jobs' counters and gauges, created once.
private struct JobMetrics: Sendable {
    let billsClosed = MetricsRegistry.shared.counter("subs_credit_daily_bills_closed_total", help: "Daily bills closed")
    let openPastBills = MetricsRegistry.shared.gauge(
        "subs_credit_daily_bills_open_past", help: "Bills of past UTC days still open after the last close (close lag)")
    let poolsCleared = MetricsRegistry.shared.counter(
        "subs_credit_pools_cleared_total", help: "SUBSCRIPTION pools cleared after a true expiry")
    let yearlyGrants = MetricsRegistry.shared.counter("subs_credit_yearly_grants_total", help: "Monthly grants of yearly plans")
    let welcomeGrants = MetricsRegistry.shared.counter("subs_credit_welcome_grants_total", help: "Welcome credit grants")
    let ledgerMismatches = MetricsRegistry.shared.gauge(
        "subs_credit_ledger_mismatches", help: "Accounts whose balance differs from their ledger or is negative (must be 0)")
}
