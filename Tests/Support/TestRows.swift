import Catalogue
import Domain
import Foundation
import Postgres
import Storage

/// Rows the ingress's read routes show, written straight into a test database (the worker that
/// normally writes them is not part of the tests that use this), for the in-process router tests
/// and the end-to-end tests alike.
public struct TestRows: Sendable {
    public static let monthly = "com.example.starter.monthly"
    public static let pro = "com.example.pro.monthly"

    let pool: PostgresPool
    let bundleID: String

    public init(pool: PostgresPool, bundleID: String) {
        self.pool = pool
        self.bundleID = bundleID
    }

    /// The demo catalogue of deploy/local, whose appKey is the tests' bundle id.
    public func applyDemoCatalogue() async throws {
        let file = try CatalogueFile.load(path: ServiceProcess.packageRoot.appendingPathComponent("deploy/local/catalog.json").path)
        try await CatalogueStore(pool: pool).apply(file, operator: "test", reason: "fixture")
    }

    /// Two products of one group: `monthly` (level 2) and `pro` (level 1).
    public func seedTwoPlanCatalogue() async throws {
        for (product, level, credits) in [(Self.monthly, 2, 1000), (Self.pro, 1, 3000)] {
            try await pool.query(
                """
                INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount)
                VALUES (\(bundleID), \(product), 'group-1', \(product), \(level), 'P1M', \(credits))
                """)
        }
    }

    /// An `entitlement.granted` event about `user` carrying `data`, queued for every endpoint
    /// registered and left DEAD there with `error` after 12 attempts, as the senders leave a
    /// delivery they gave up on; the event's id.
    public func addDeadDelivery(user: String, data: [String: OutboundValue], error: String) async throws -> String {
        let key = "test-\(UUID().uuidString)"
        let event = OutboundEvent(
            key: key, type: .entitlementGranted, userID: user, environment: "Sandbox", occurredAt: Date(), data: data)
        try await pool.transaction { db in _ = try await OutboundEventStore(pool: pool).append([event], on: db) }
        let id: String = try await pool.query("SELECT id FROM outbound_event WHERE event_key = \(key)").single().decode("id")
        _ = try await WebhookStore(pool: pool).enqueue(eventID: id, type: event.type.rawValue, environment: "Sandbox", payload: Array("{}".utf8))
        try await pool.query(
            "UPDATE webhook_delivery SET status = 'DEAD', attempts = 12, last_status_code = 500, last_error = \(error) WHERE event_id = \(id)")
        return id
    }

    public func addUser(_ userID: String) async throws {
        try await pool.query("INSERT INTO app_user (user_id) VALUES (\(userID)) ON CONFLICT DO NOTHING")
    }

    public func addSubscription(
        user: String, product: String, status: String, expiresAt: Date?, graceExpiresAt: Date? = nil,
        pendingProduct: String? = nil, autoRenew: Bool = true, familyShared: Bool = false, environment: String = "Sandbox",
        group: String = "21000000", originalTransactionID: String = String(UInt64.random(in: 1_000_000_000...9_999_999_999)),
        inBillingRetry: Bool? = nil
    ) async throws {
        try await addUser(user)
        // As the worker writes a row in that status: the moment it changes by the clock (its
        // period's end, its grace's end, the end of Apple's 60 days of retries).
        let nextChange: Date? =
            switch status {
            case "ACTIVE": expiresAt
            case "GRACE": graceExpiresAt
            case "BILLING_RETRY": expiresAt.map { $0 + 60 * 86_400 }
            default: nil
            }
        let retrying = inBillingRetry ?? (status == "GRACE" || status == "BILLING_RETRY")
        try await pool.query(
            """
            INSERT INTO user_subscription (environment, original_transaction_id, user_id, subscription_group_id, active_product_id,
                pending_product_id, status, auto_renew_enabled, expires_at, grace_expires_at, last_transaction_id,
                last_signed_date, is_family_shared, in_billing_retry, next_change_at)
            VALUES (\(environment), \(originalTransactionID), \(user), \(group), \(product), \(pendingProduct), \(status),
                \(autoRenew), \(expiresAt), \(graceExpiresAt), \(originalTransactionID), now(), \(familyShared), \(retrying),
                \(nextChange))
            """)
    }
}

/// A read that did not answer 200.
public struct UnexpectedResponse: Error, CustomStringConvertible {
    public let path: String
    public let status: Int
    public let body: String

    public init(path: String, status: Int, body: String) {
        self.path = path
        self.status = status
        self.body = body
    }

    public var description: String { "GET \(path) answered \(status): \(body)" }
}

/// A date with whole seconds, so it survives RFC 3339 without fractions unchanged.
public func wholeSeconds(_ offset: TimeInterval) -> Date {
    Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + offset).rounded(.down))
}
