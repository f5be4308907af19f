import Domain
import Foundation
import Postgres
import ServiceRuntime

/// The credit jobs driven by time: daily close, clearing of expired subscription pools, the
/// monthly grants of yearly plans and welcome credits (one file each, with the ledger invariant
/// check). Each takes "now" as an argument, so tests
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
    /// The jobs' writes to the balances, lots and ledger.
    let ledger: CreditLedger
    let metrics = JobMetrics()

    /// The transaction advisory lock every batch takes (an arbitrary constant of this project).
    static let lockKey: Int64 = 0x0C4E_D175_10B5

    public init(pool: PostgresPool, appKey: String, configuration: CreditsConfiguration, logger: Logger) {
        self.pool = pool
        self.appKey = appKey
        self.configuration = configuration
        self.logger = logger
        ledger = CreditLedger(pool: pool)
    }

    /// What one run of every job did.
    public struct Report: Sendable, Hashable {
        public var welcomeGrants = 0
        public var monthlyGrants = 0
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
        report.monthlyGrants = try await grantPlanMonths(now: now, wait: wait)
        report.billsClosed = try await closeDays(now: now, wait: wait)
        report.poolsCleared = try await clearExpiredPools(now: now, wait: wait)
        return report
    }

    /// Runs `body` in a transaction holding the jobs' lock; nil when `wait` is false and another
    /// worker holds it.
    func batch<R: Sendable>(wait: Bool, _ body: (PostgresConnection) async throws -> R) async throws -> R? {
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

    /// Counts and logs grants refused at the maximum balance (`CreditLedger.grantRefusingOverLimit`).
    func recordRefusals(_ refused: [CreditGrant]) {
        guard !refused.isEmpty else { return }
        metrics.grantsRefused.increment(by: refused.count)
        for grant in refused {
            logger.error(
                "credit grant refused: the pool would pass CREDITS_MAX_BALANCE",
                [
                    "error.code": .string(CreditLimitExceeded.code), "user.id": .string(grant.userID),
                    "credits.pool": .string(grant.decision.pool.rawValue), "credits.grant_key": .string(grant.decision.grantKey),
                ])
        }
    }

    /// Runs batches until one does nothing (or the lock is busy); returns the total done.
    func repeatBatches(wait: Bool, _ body: (PostgresConnection) async throws -> Int) async throws -> Int {
        var total = 0
        while let done = try await batch(wait: wait, body), done > 0 { total += done }
        return total
    }
}

/// Ledger rows to insert in one statement, as parallel arrays.
struct LedgerEntries {
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
}

/// The jobs' counters and gauges, created once.
struct JobMetrics: Sendable {
    let billsClosed = MetricsRegistry.shared.counter("subs_credit_daily_bills_closed_total", help: "Daily bills closed")
    let openPastBills = MetricsRegistry.shared.gauge(
        "subs_credit_daily_bills_open_past", help: "Bills of past UTC days still open after the last close (close lag)")
    let poolsCleared = MetricsRegistry.shared.counter(
        "subs_credit_pools_cleared_total", help: "SUBSCRIPTION pools cleared after a true expiry")
    // The name predates plans other than yearly ones; dashboards and alerts read it.
    let monthlyGrants = MetricsRegistry.shared.counter(
        "subs_credit_yearly_grants_total", help: "Monthly grants of plans longer than a month (yearly and others)")
    let welcomeGrants = MetricsRegistry.shared.counter("subs_credit_welcome_grants_total", help: "Welcome credit grants")
    let grantsRefused = MetricsRegistry.shared.counter(
        "subs_credit_grants_refused_total", help: "Job grants refused because their pool would pass CREDITS_MAX_BALANCE (recorded)")
    let billCloseFailures = MetricsRegistry.shared.counter(
        "subs_credit_bill_close_failures_total", help: "Daily bills the close set aside (recorded with their reason; retried the next day)")
    let failedBills = MetricsRegistry.shared.gauge(
        "subs_credit_daily_bills_failed", help: "Daily bills set aside by the close and not closed since (must be 0)")
    let ledgerMismatches = MetricsRegistry.shared.gauge(
        "subs_credit_ledger_mismatches", help: "Accounts whose balance differs from their ledger or their lots, or is negative (must be 0)")
}
