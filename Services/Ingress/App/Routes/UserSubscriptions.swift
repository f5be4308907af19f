import Domain
import Foundation
import Postgres

/// A user's `user_subscription` rows as the read endpoints see them.
struct UserSubscription: Sendable {
    var environment: String
    var originalTransactionID: String
    var subscriptionGroupID: String?
    var activeProductID: String
    var pendingProductID: String?
    var storedStatus: SubscriptionStatus
    var autoRenewEnabled: Bool
    var expiresAt: Date?
    var graceExpiresAt: Date?
    var isFamilyShared: Bool

    /// Every chain of the user, the latest expiry first (a non-expiring one before all).
    static func load(userID: String, pool: PostgresPool) async throws -> [UserSubscription] {
        try await pool.query(
            """
            SELECT environment, original_transaction_id, subscription_group_id, active_product_id, pending_product_id,
                status, auto_renew_enabled, expires_at, grace_expires_at, is_family_shared
            FROM user_subscription WHERE user_id = \(userID)
            ORDER BY expires_at DESC NULLS FIRST, id DESC
            """
        ).map { row in
            let status: String = try row.decode("status")
            guard let stored = SubscriptionStatus(rawValue: status) else {
                throw PostgresError.decoding(column: "status", reason: "a status the domain does not know")
            }
            return UserSubscription(
                environment: try row.decode("environment"), originalTransactionID: try row.decode("original_transaction_id"),
                subscriptionGroupID: try row.decode("subscription_group_id"), activeProductID: try row.decode("active_product_id"),
                pendingProductID: try row.decode("pending_product_id"), storedStatus: stored,
                autoRenewEnabled: try row.decode("auto_renew_enabled"), expiresAt: try row.decode("expires_at"),
                graceExpiresAt: try row.decode("grace_expires_at"), isFamilyShared: try row.decode("is_family_shared"))
        }
    }

    /// The status at `now`. A row is recomputed when a fact arrives, but time passes between
    /// facts: a paid period can end before the renewal (or its absence) is known.
    func status(at now: Date) -> SubscriptionStatus {
        switch storedStatus {
        case .active:
            guard let expiresAt, expiresAt <= now else { return .active }
            if let graceExpiresAt, graceExpiresAt > now { return .grace }
            return .expired
        case .grace:
            // Apple keeps retrying the charge after the grace period: no service, recovery possible.
            guard let graceExpiresAt, graceExpiresAt <= now else { return .grace }
            return .billingRetry
        case .billingRetry, .expired, .revoked:
            return storedStatus
        }
    }
}
