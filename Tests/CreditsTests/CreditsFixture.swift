import Credits
import Domain
import Foundation
import Postgres
import ServiceRuntime
import TestSupport
import Testing

/// A migrated database of its own with helpers to create users, balances, rates and
/// subscriptions, and to read the books.
struct CreditsFixture {
    static let appKey = "com.example.subscriptions"
    let database: TestDatabase
    var pool: PostgresPool { database.pool }

    /// Runs `body` with a fixture of its own, whose database is dropped after it (also on throw).
    @discardableResult
    static func with<R>(_ body: (CreditsFixture) async throws -> R) async throws -> R {
        try await withTestDatabase("credits") { database in try await body(CreditsFixture(database: database)) }
    }

    func jobs(welcome: Int64 = 0, batchSize: Int = 1000, limits: CreditLimits = CreditLimits()) -> CreditJobs {
        CreditJobs(
            pool: pool, appKey: Self.appKey,
            configuration: CreditsConfiguration(welcomeCredits: welcome, batchSize: batchSize, limits: limits),
            logger: Logger(label: "credits-test", level: .warning))
    }

    func user(_ id: String) async throws {
        try await pool.query("INSERT INTO app_user (user_id) VALUES (\(id)) ON CONFLICT DO NOTHING")
    }

    /// Grants `micro` micro-credits into a pool under a fresh key, as a lot of the Sandbox chain
    /// `chain` if given.
    func fund(
        _ user: String, _ pool: CreditPool, micro: MicroCredits, key: String = UUID().uuidString, chain: String? = nil
    ) async throws {
        try await self.user(user)
        try await self.pool.transaction { db in
            try await CreditLedger(pool: self.pool).grant(
                [
                    CreditGrant(
                        userID: user, decision: GrantDecision(grantKey: key, pool: pool, amount: micro, reason: "TEST"),
                        environment: chain.map { _ in "Sandbox" }, transactionID: chain, originalTransactionID: chain)
                ],
                limits: CreditLimits(), on: db)
        }
    }

    func rate(_ code: String, version: Int = 1, micro: Int64, from: Date = Date(timeIntervalSince1970: 0)) async throws {
        try await pool.query(
            """
            INSERT INTO credit_rate_version (code, version, micro_credits_per_unit, effective_from)
            VALUES (\(code), \(version), \(micro), \(from))
            """)
    }

    func balances(_ user: String) async throws -> [CreditPool: MicroCredits] {
        var balances: [CreditPool: MicroCredits] = [:]
        for row in try await pool.query("SELECT pool, balance FROM credit_account WHERE user_id = \(user)") {
            balances[CreditPool(rawValue: try row.decode("pool"))!] = try row.decode("balance")
        }
        return balances
    }

    func total(_ user: String) async throws -> MicroCredits { try await balances(user).values.reduce(0, +) }

    func use(
        _ user: String, units: Int64, rate: String = "call", key: String = UUID().uuidString, service: String = "svc",
        at occurred: Date? = nil, now: Date = Date()
    ) async throws -> UsageOutcome {
        try await CreditMeter(pool: pool).use(
            UsageRequest(service: service, idempotencyKey: key, userID: user, units: units, rateCode: rate, occurredAt: occurred),
            now: now)
    }

    /// What remains of each lot, by grant key.
    func remaining() async throws -> [String: MicroCredits] {
        var lots: [String: MicroCredits] = [:]
        for row in try await pool.query("SELECT grant_key, remaining FROM credit_grant") {
            lots[try row.decode("grant_key")] = try row.decode("remaining")
        }
        return lots
    }

    func violations() async throws -> Int {
        try await pool.withConnection { try await CreditLedger(pool: self.pool).invariantViolations(on: $0) }
    }

    func count(_ sql: String) async throws -> Int { try await database.count(sql) }

    /// A subscription chain with its last transaction, as fulfillment writes them.
    func subscription(
        user: String, original: String, transaction: String? = nil, product: String, status: String, purchase: Date,
        expires: Date?, revoked: Date? = nil, environment: String = "Sandbox", known: Date? = nil
    ) async throws {
        try await self.user(user)
        let transaction = transaction ?? original
        try await pool.query(
            """
            INSERT INTO apple_transaction (environment, transaction_id, original_transaction_id, user_id, product_id,
                                           purchase_date, expires_date, revocation_date, ownership_type, signed_date, payload_hash)
            VALUES (\(environment), \(transaction), \(original), \(user), \(product), \(purchase), \(expires), \(revoked),
                    'PURCHASED', \(purchase), 'hash')
            ON CONFLICT (environment, transaction_id) DO UPDATE SET revocation_date = EXCLUDED.revocation_date
            """)
        try await pool.query(
            """
            INSERT INTO user_subscription (environment, original_transaction_id, user_id, active_product_id, status,
                                           auto_renew_enabled, expires_at, last_transaction_id, last_signed_date)
            VALUES (\(environment), \(original), \(user), \(product), \(status), true, \(expires), \(transaction), \(purchase))
            ON CONFLICT (environment, original_transaction_id) DO UPDATE SET
                status = EXCLUDED.status, expires_at = EXCLUDED.expires_at, last_transaction_id = EXCLUDED.last_transaction_id
            """)
        if let known {
            // When the status became known, as fulfillment's history records it.
            try await pool.query(
                """
                INSERT INTO status_history (entity_type, entity_key, current_status, cause, created_at)
                VALUES ('SUBSCRIPTION', \(environment + ":" + original), \(status), 'test', \(known))
                """)
        }
    }

    func product(_ id: String, duration: String, credits: Int64) async throws {
        try await pool.query(
            """
            INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount)
            VALUES (\(Self.appKey), \(id), 'group', \(id), 1, \(duration), \(credits))
            """)
    }
}

extension Date {
    /// `2026-01-31T10:00:00Z`-style literal for tests.
    static func utc(_ text: String) -> Date { RFC3339.date(from: text)! }
}
