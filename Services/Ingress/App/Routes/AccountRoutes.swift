import Credits
import Domain
import Foundation
import HTTPServer
import ServiceRuntime
import Storage

/// The caller's own state: current subscriptions, consent, credits balance, grants and daily bills.
///
/// Credit amounts are stored as integer micro-credits; the API writes them as exact decimal
/// strings of credits (`"1000"`, `"0.25"`) so no client parses money through a float, and the
/// balance adds the whole credits spendable now and the exact micro-credit total.
struct AccountRoutes: Sendable {
    let subscriptions: SubscriptionStore
    let consents: ConsentStore
    let credits: CreditStatementStore
    /// The credit statements (grants, daily bills), on the read pool.
    let statements: CreditStatementStore
    let cursors: PageCursorSigner
    let clock: any WallClock

    func register(in api: inout RouterGroup<IngressRequestContext>) {
        api.get("subscriptions/current") { _, context in try await current(user: try context.requireUser()) }
        api.get("credits/balance") { _, context in try await balance(user: try context.requireUser()) }
        api.get("credits/grants") { request, context in try await grants(request, user: try context.requireUser()) }
        api.get("credits/daily-bills") { request, context in try await dailyBills(request, user: try context.requireUser()) }
        api.get("subscriptions/consumption-consent") { _, context in try await consent(user: try context.requireUser()) }
        api.put("subscriptions/consumption-consent") { request, context in
            try await recordConsent(request, user: try context.requireUser())
        }
    }

    // MARK: - Consent

    /// Whether Apple may be told about the user's use of a purchase when it asks during a refund
    /// request (CONSUMPTION_REQUEST); the app asks the user and sends the choice here.
    struct ConsentView: Codable, Sendable {
        let consumptionData: ConsumptionConsent
    }

    func consent(user: AuthenticatedUser) async throws -> HTTPResponse {
        let consent = try await consents.load(userID: user.userID)
        return .json(ConsentView(consumptionData: consent))
    }

    func recordConsent(_ request: HTTPRequest, user: AuthenticatedUser) async throws -> HTTPResponse {
        let body = try request.decodeJSON(ConsentView.self)
        let outcome = try await consents.record(
            body.consumptionData, userID: user.userID, createUser: true, recordedBy: "user", reason: "user choice through the app")
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
        @ExplicitNull var priceIncreaseStatus: PriceIncreaseStatus?
        @ExplicitNull var renewalPrice: Int64?
        @ExplicitNull var renewalCurrency: String?
    }

    /// Where the user stands on a price increase of the next renewal (Apple's priceIncreaseStatus
    /// 0 and 1), so the app can ask for consent.
    enum PriceIncreaseStatus: String, Encodable, Sendable {
        case pending = "PENDING"
        case accepted = "ACCEPTED"

        init?(apple value: Int?) {
            switch value {
            case 0: self = .pending
            case 1: self = .accepted
            default: return nil
            }
        }
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
            case priceIncreaseStatus, renewalPrice, renewalCurrency
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

    func current(user: AuthenticatedUser) async throws -> HTTPResponse {
        let rows = try await subscriptions.subscriptions(userID: user.userID)
        let now = clock.now()
        return .json(
            CurrentSubscriptions(
                subscriptions: rows.map { row in
                    let status = row.status(at: now)
                    return SubscriptionView(
                        status: status, activeProductId: row.activeProductID, pendingProductId: row.pendingProductID,
                        subscriptionGroupId: row.subscriptionGroupID, autoRenewEnabled: row.autoRenewEnabled,
                        expiresAt: row.expiresAt, graceExpiresAt: status == .grace ? row.graceExpiresAt : nil,
                        environment: row.environment, originalTransactionId: row.originalTransactionID,
                        isFamilyShared: row.isFamilyShared, priceIncreaseStatus: PriceIncreaseStatus(apple: row.priceIncreaseStatus),
                        renewalPrice: row.renewalPrice, renewalCurrency: row.renewalCurrency)
                }))
    }

    // MARK: - Balance

    func balance(user: AuthenticatedUser) async throws -> HTTPResponse {
        let pools = try await credits.balances(userID: user.userID)
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

    func grants(_ request: HTTPRequest, user: AuthenticatedUser) async throws -> HTTPResponse {
        let page = try PageRequest(request, list: "grants", userID: user.userID, cursors: cursors)
        let grants = try await statements.grants(
            userID: user.userID, after: page.after.map { (Self.date(micros: $0.position), $0.id) }, limit: page.limit + 1)
        return .json(
            Page(
                rows: grants, limit: page.limit,
                item: {
                    GrantView(
                        grantKey: $0.grantKey, pool: $0.pool, amount: Self.decimal($0.amount),
                        revokedAmount: Self.decimal($0.revokedAmount), reason: $0.reason, transactionId: $0.transactionID,
                        createdAt: $0.createdAt)
                },
                cursor: { PageCursor(list: "grants", userID: user.userID, position: Self.micros($0.createdAt), id: $0.id) },
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

    func dailyBills(_ request: HTTPRequest, user: AuthenticatedUser) async throws -> HTTPResponse {
        let page = try PageRequest(request, list: "daily-bills", userID: user.userID, cursors: cursors)
        let bills = try await statements.dailyBills(
            userID: user.userID, after: page.after.map { ($0.position, $0.id) }, limit: page.limit + 1)
        return .json(
            Page(
                rows: bills, limit: page.limit,
                item: {
                    DailyBillView(
                        day: $0.day, totalCost: Self.decimal($0.totalCost), charged: Self.decimal($0.charged),
                        rounding: Self.decimal($0.rounding), settled: Self.decimal($0.settled), shortfall: Self.decimal($0.shortfall),
                        closedAt: $0.closedAt)
                },
                cursor: { PageCursor(list: "daily-bills", userID: user.userID, position: $0.epochDay, id: $0.id) },
                signer: cursors))
    }
}
