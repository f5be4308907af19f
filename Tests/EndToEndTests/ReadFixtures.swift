import Catalogue
import Foundation
import Postgres
import TestSupport

/// Rows the read endpoints show, written straight into the harness's database (the worker that
/// normally writes them is not part of these tests).
extension IngressHarness {
    /// The demo catalogue of deploy/local, whose appKey is the harness's bundle id.
    func applyDemoCatalogue() async throws {
        let file = try CatalogueFile.load(path: ServiceProcess.packageRoot.appendingPathComponent("deploy/local/catalog.json").path)
        try await CatalogueStore(pool: pool).apply(file, operator: "e2e", reason: "fixture")
    }

    /// Two products of one group for the order endpoints: the starter (level 2) and pro (level 1) monthly plans.
    func seedOrderCatalogue() async throws {
        for (product, level, credits) in [("com.example.starter.monthly", 2, 1000), ("com.example.pro.monthly", 1, 3000)] {
            try await pool.query(
                """
                INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount)
                VALUES (\(IngressHarness.bundleID), \(product), 'group-1', \(product), \(level), 'MONTH', \(credits))
                """)
        }
    }

    func addUser(_ userID: String) async throws {
        try await pool.query("INSERT INTO app_user (user_id) VALUES (\(userID)) ON CONFLICT DO NOTHING")
    }

    func addSubscription(
        user: String, product: String, status: String, expiresAt: Date?, graceExpiresAt: Date? = nil,
        pendingProduct: String? = nil, autoRenew: Bool = true, familyShared: Bool = false, environment: String = "Sandbox",
        originalTransactionID: String = String(UInt64.random(in: 1_000_000_000...9_999_999_999))
    ) async throws {
        try await addUser(user)
        try await pool.query(
            """
            INSERT INTO user_subscription (environment, original_transaction_id, user_id, subscription_group_id, active_product_id,
                pending_product_id, status, auto_renew_enabled, expires_at, grace_expires_at, last_transaction_id,
                last_signed_date, is_family_shared)
            VALUES (\(environment), \(originalTransactionID), \(user), '21000000', \(product), \(pendingProduct), \(status),
                \(autoRenew), \(expiresAt), \(graceExpiresAt), \(originalTransactionID), now(), \(familyShared))
            """)
    }

    func authorized(_ userID: String) -> [String: String] { ["Authorization": "Bearer \(userToken(userID))"] }

    /// GET as `userID`, expecting a 200 JSON object.
    func read(_ path: String, as userID: String) async throws -> [String: Any] {
        let response = try await client.get(path, headers: authorized(userID))
        guard response.status == 200 else { throw UnexpectedResponse(path: path, status: response.status, body: response.text) }
        return try response.json()
    }
}

struct UnexpectedResponse: Error, CustomStringConvertible {
    let path: String
    let status: Int
    let body: String
    var description: String { "GET \(path) answered \(status): \(body)" }
}

/// A date with whole seconds, so it survives RFC 3339 without fractions unchanged.
func wholeSeconds(_ offset: TimeInterval) -> Date {
    Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + offset).rounded(.down))
}
