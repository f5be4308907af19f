import Credits
import Domain
import Foundation
import HTTPServer
import Postgres
import ServiceRuntime
import Storage

/// The caller's own state: current subscriptions, consent, credits balance, grants and daily bills.
///
/// Credit amounts are stored as integer micro-credits; the API writes them as exact decimal
/// strings of credits (`"1000"`, `"0.25"`) so no client parses money through a float, and the
/// balance adds the whole credits spendable now and the exact micro-credit total.
struct AccountRoutes: Sendable {
    static let currentPath = "/api/v1/subscriptions/current"
    static let balancePath = "/api/v1/credits/balance"
    static let grantsPath = "/api/v1/credits/grants"
    static let dailyBillsPath = "/api/v1/credits/daily-bills"
    static let consentPath = "/api/v1/subscriptions/consumption-consent"

    let context: IngressContext
    let cursors: PageCursorSigner

    init(context: IngressContext) {
        self.context = context
        cursors = PageCursorSigner(key: context.configuration.cursorSigningKey)
    }

    func register(in router: inout Router) {
        router.get(Self.currentPath) { request in try await current(request) }
        router.get(Self.balancePath) { request in try await balance(request) }
        router.get(Self.grantsPath) { request in try await grants(request) }
        router.get(Self.dailyBillsPath) { request in try await dailyBills(request) }
        router.get(Self.consentPath) { request in try await consent(request) }
        router.put(Self.consentPath) { request in try await recordConsent(request) }
    }

    // MARK: - Consent

    /// Whether Apple may be told about the user's use of a purchase when it asks during a refund
    /// request (CONSUMPTION_REQUEST); the app asks the user and sends the choice here.
    struct ConsentView: Codable, Sendable {
        let consumptionData: ConsumptionConsent
    }

    func consent(_ request: HTTPRequest) async throws -> HTTPResponse {
        let user = try context.authenticator.authenticate(request)
        let consent = try await APIError.databaseCall { try await ConsentStore.load(userID: user.userID, pool: context.pool) }
        return .json(ConsentView(consumptionData: consent))
    }

    func recordConsent(_ request: HTTPRequest) async throws -> HTTPResponse {
        let user = try context.authenticator.authenticate(request)
        let body = try request.decodeJSON(ConsentView.self)
        let outcome = try await APIError.databaseCall {
            try await ConsentStore.record(
                body.consumptionData, userID: user.userID, createUser: true, recordedBy: "user", reason: "user choice through the app",
                pool: context.pool)
        }
        // Never nil: the user row is created with the choice.
        return .json(ConsentView(consumptionData: outcome?.after ?? body.consumptionData))
    }

    // MARK: - Current subscriptions

    /// One chain as clients see it; fields without a value are written as null.
    struct SubscriptionView: Encodable, Sendable {
        let status: SubscriptionStatus
        let activeProductId: String
        @ExplicitNull var pendingProductId: String?
        @ExplicitNull var subscriptionGroupId: String?
        let autoRenewEnabled: Bool
        @ExplicitNull var expiresAt: Date?
        @ExplicitNull var graceExpiresAt: Date?
        let environment: String
        let originalTransactionId: String
        let isFamilyShared: Bool
    }

    /// Every chain of the user (`subscriptions`, the latest expiry first) and, at the top level,
    /// the fields of the one that counts now: the first with service, else the latest. domain.md
    /// names the current subscription's fields, not a list, so a client reading them directly
    /// finds them there; all null for a user without any subscription.
    struct CurrentSubscriptions: Encodable, Sendable {
        let subscriptions: [SubscriptionView]

        private enum CodingKeys: String, CodingKey, CaseIterable {
            case subscriptions
            case status, activeProductId, pendingProductId, subscriptionGroupId, autoRenewEnabled, expiresAt
            case graceExpiresAt, environment, originalTransactionId, isFamilyShared
        }

        func encode(to encoder: any Encoder) throws {
            if let current = subscriptions.first(where: { $0.status.hasService }) ?? subscriptions.first {
                // The same keyed container: the current chain's fields beside the list.
                try current.encode(to: encoder)
            } else {
                var container = encoder.container(keyedBy: CodingKeys.self)
                for key in CodingKeys.allCases where key != .subscriptions { try container.encodeNil(forKey: key) }
            }
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(subscriptions, forKey: .subscriptions)
        }
    }

    func current(_ request: HTTPRequest) async throws -> HTTPResponse {
        let user = try context.authenticator.authenticate(request)
        let rows = try await APIError.databaseCall { try await UserSubscription.load(userID: user.userID, pool: context.pool) }
        let now = context.clock.now()
        return .json(
            CurrentSubscriptions(
                subscriptions: rows.map { row in
                    let status = row.status(at: now)
                    return SubscriptionView(
                        status: status, activeProductId: row.activeProductID, pendingProductId: row.pendingProductID,
                        subscriptionGroupId: row.subscriptionGroupID, autoRenewEnabled: row.autoRenewEnabled,
                        expiresAt: row.expiresAt, graceExpiresAt: status == .grace ? row.graceExpiresAt : nil,
                        environment: row.environment, originalTransactionId: row.originalTransactionID,
                        isFamilyShared: row.isFamilyShared)
                }))
    }

    // MARK: - Balance

    func balance(_ request: HTTPRequest) async throws -> HTTPResponse {
        let user = try context.authenticator.authenticate(request)
        let rows = try await APIError.databaseCall {
            try await context.pool.query("SELECT pool, balance FROM credit_account WHERE user_id = \(user.userID)")
        }
        var pools: [CreditPool: MicroCredits] = [:]
        for row in rows {
            guard let pool = CreditPool(rawValue: try row.decode("pool", as: String.self)) else { continue }
            pools[pool] = try row.decode("balance", as: Int64.self)
        }
        return HTTPResponse(status: 200, headers: [("Content-Type", "application/json")], body: CreditBalance(pools).json)
    }

    static func decimal(_ micro: MicroCredits) -> String { CreditAmount.decimal(micro) }

    // MARK: - Grants

    struct GrantView: Encodable, Sendable {
        let grantKey: String
        let pool: String
        let amount: String
        let revokedAmount: String
        let reason: String
        @ExplicitNull var transactionId: String?
        let createdAt: Date
    }

    private struct GrantRow {
        let id: Int64
        let view: GrantView
    }

    func grants(_ request: HTTPRequest) async throws -> HTTPResponse {
        let user = try context.authenticator.authenticate(request)
        let page = try PageRequest(request, list: "grants", userID: user.userID, cursors: cursors)
        let fetch = page.limit + 1
        let rows = try await APIError.databaseCall { () async throws -> PostgresRows in
            if let after = page.after {
                let time = Self.date(micros: after.position)
                return try await context.pool.query(
                    """
                    SELECT id, grant_key, pool, amount, revoked_amount, reason, transaction_id, created_at FROM credit_grant
                    WHERE user_id = \(user.userID) AND (created_at, id) < (\(time), \(after.id))
                    ORDER BY created_at DESC, id DESC LIMIT \(fetch)
                    """)
            }
            return try await context.pool.query(
                """
                SELECT id, grant_key, pool, amount, revoked_amount, reason, transaction_id, created_at FROM credit_grant
                WHERE user_id = \(user.userID) ORDER BY created_at DESC, id DESC LIMIT \(fetch)
                """)
        }
        let grants = try rows.map { row in
            GrantRow(
                id: try row.decode("id"),
                view: GrantView(
                    grantKey: try row.decode("grant_key"), pool: try row.decode("pool"),
                    amount: Self.decimal(try row.decode("amount")), revokedAmount: Self.decimal(try row.decode("revoked_amount")),
                    reason: try row.decode("reason"), transactionId: try row.decode("transaction_id"),
                    createdAt: try row.decode("created_at")))
        }
        return .json(
            Page(
                rows: grants, limit: page.limit, item: \.view,
                cursor: { PageCursor(list: "grants", userID: user.userID, position: Self.micros($0.view.createdAt), id: $0.id) },
                signer: cursors))
    }

    /// Microseconds since 1970: PostgreSQL's own resolution, so a position names one instant exactly.
    static func micros(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1_000_000).rounded()) }
    static func date(micros: Int64) -> Date { Date(timeIntervalSince1970: Double(micros) / 1_000_000) }

    // MARK: - Daily bills

    struct DailyBillView: Encodable, Sendable {
        /// The UTC day, `YYYY-MM-DD`.
        let day: String
        let totalCost: String
        let charged: String
        let rounding: String
        let settled: String
        let shortfall: String
        @ExplicitNull var closedAt: Date?
    }

    private struct DailyBillRow {
        let id: Int64
        let epochDay: Int64
        let view: DailyBillView
    }

    func dailyBills(_ request: HTTPRequest) async throws -> HTTPResponse {
        let user = try context.authenticator.authenticate(request)
        let page = try PageRequest(request, list: "daily-bills", userID: user.userID, cursors: cursors)
        let fetch = page.limit + 1
        let rows = try await APIError.databaseCall { () async throws -> PostgresRows in
            if let after = page.after {
                return try await context.pool.query(
                    """
                    SELECT id, day::text AS day, day - date '1970-01-01' AS epoch_day, total_cost, charged, rounding, settled,
                        shortfall, closed_at
                    FROM credit_daily_bill
                    WHERE user_id = \(user.userID) AND (day, id) < (date '1970-01-01' + \(after.position)::integer, \(after.id))
                    ORDER BY day DESC, id DESC LIMIT \(fetch)
                    """)
            }
            return try await context.pool.query(
                """
                SELECT id, day::text AS day, day - date '1970-01-01' AS epoch_day, total_cost, charged, rounding, settled,
                    shortfall, closed_at
                FROM credit_daily_bill WHERE user_id = \(user.userID) ORDER BY day DESC, id DESC LIMIT \(fetch)
                """)
        }
        let bills = try rows.map { row in
            DailyBillRow(
                id: try row.decode("id"), epochDay: try row.decode("epoch_day"),
                view: DailyBillView(
                    day: try row.decode("day"), totalCost: Self.decimal(try row.decode("total_cost")),
                    charged: Self.decimal(try row.decode("charged")), rounding: Self.decimal(try row.decode("rounding")),
                    settled: Self.decimal(try row.decode("settled")), shortfall: Self.decimal(try row.decode("shortfall")),
                    closedAt: try row.decode("closed_at")))
        }
        return .json(
            Page(
                rows: bills, limit: page.limit, item: \.view,
                cursor: { PageCursor(list: "daily-bills", userID: user.userID, position: $0.epochDay, id: $0.id) },
                signer: cursors))
    }
}
