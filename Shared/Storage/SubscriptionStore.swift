import Domain
import Foundation
import Postgres

/// One `user_subscription` row (a transaction chain) as the read endpoints see it.
public struct UserSubscription: Sendable, Equatable {
    public var environment: String
    public var originalTransactionID: String
    public var subscriptionGroupID: String?
    public var activeProductID: String
    public var pendingProductID: String?
    public var storedStatus: SubscriptionStatus
    public var autoRenewEnabled: Bool
    public var expiresAt: Date?
    public var graceExpiresAt: Date?
    public var isFamilyShared: Bool
    /// Apple's `priceIncreaseStatus` of the chain's renewal info: 0 not yet answered, 1 accepted (or
    /// a rise that needs no consent); nil without a price increase.
    public var priceIncreaseStatus: Int?
    /// The next renewal's price in milliunits of `renewalCurrency`, as the renewal info gives it.
    public var renewalPrice: Int64?
    public var renewalCurrency: String?

    /// Apple is retrying the renewal of the current period.
    public var inBillingRetry: Bool = false
    /// The next moment the status changes by the clock alone.
    public var nextChangeAt: Date?
    /// See `SubscriptionState.commitmentEndsAt`.
    public var commitmentEndsAt: Date?

    /// The status at `now`: the stored one until its next change, `SubscriptionTimeline`'s rule
    /// after it (the clock job stores it within seconds; readers do not wait for it).
    public func status(at now: Date) -> SubscriptionStatus {
        SubscriptionTimeline(
            revoked: storedStatus == .revoked, expiresAt: expiresAt, graceExpiresAt: graceExpiresAt,
            inBillingRetry: inBillingRetry, autoRenewEnabled: autoRenewEnabled, commitmentEndsAt: commitmentEndsAt
        ).status(at: now, stored: storedStatus, nextChangeAt: nextChangeAt)
    }
}

extension UserSubscription {
    /// The columns of `user_subscription s` that `init(row:)` decodes; a reader selects them with
    /// whatever else it needs.
    static let columns: StaticString = """
        s.environment, s.original_transaction_id, s.subscription_group_id, s.active_product_id, s.pending_product_id,
        s.status, s.auto_renew_enabled, s.expires_at, s.grace_expires_at, s.is_family_shared, s.in_billing_retry,
        s.next_change_at, s.commitment_ends_at
        """

    /// A chain from a row holding `columns`; the renewal info's fields are left to readers that join it.
    init(row: PostgresRow) throws {
        self.init(
            environment: try row.decode("environment"), originalTransactionID: try row.decode("original_transaction_id"),
            subscriptionGroupID: try row.decode("subscription_group_id"), activeProductID: try row.decode("active_product_id"),
            pendingProductID: try row.decode("pending_product_id"), storedStatus: try row.decodeValue("status"),
            autoRenewEnabled: try row.decode("auto_renew_enabled"), expiresAt: try row.decode("expires_at"),
            graceExpiresAt: try row.decode("grace_expires_at"), isFamilyShared: try row.decode("is_family_shared"),
            inBillingRetry: try row.decode("in_billing_retry"), nextChangeAt: try row.decode("next_change_at"),
            commitmentEndsAt: try row.decode("commitment_ends_at"))
    }
}

/// What a client learns after submitting a transaction: the order, the subscription of the
/// transaction's chain and the user's credits.
public struct PurchaseResult: Sendable, Equatable {
    public var orderNo: String?
    public var orderStatus: OrderStatus?
    public var subscriptionStatus: SubscriptionStatus?
    public var activeProductID: String?
    public var expiresAt: Date?
    /// Micro-credits over all of the user's pools.
    public var balance: MicroCredits
    /// Whose chain the transaction is on (nil until it is applied).
    public var chainOwner: String?
}

/// The read side of subscriptions (`user_subscription` and what a result joins to it); the
/// worker writes them.
public struct SubscriptionStore: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Every chain of the user, the latest expiry first (a non-expiring one before all).
    public func subscriptions(userID: String) async throws -> [UserSubscription] {
        try await pool.query(
            """
            SELECT \(sql: UserSubscription.columns), r.price_increase_status, r.renewal_price, r.renewal_currency
            FROM user_subscription s
            LEFT JOIN apple_renewal_info r ON r.environment = s.environment AND r.original_transaction_id = s.original_transaction_id
            WHERE s.user_id = \(userID)
            ORDER BY s.expires_at DESC NULLS FIRST, s.id DESC
            """
        ).map { row in
            var subscription = try UserSubscription(row: row)
            subscription.priceIncreaseStatus = try row.decode("price_increase_status")
            subscription.renewalPrice = try row.decode("renewal_price")
            subscription.renewalCurrency = try row.decode("renewal_currency")
            return subscription
        }
    }

    /// The product of the user's own (not family-shared) subscription with service now in a
    /// group of the app, the latest expiring one if several.
    static func currentProduct(userID: String, group: String, appKey: String, on db: PostgresConnection) async throws
        -> String?
    {
        let serving = [SubscriptionStatus.active, .grace].map(\.rawValue)
        return try await db.query(
            """
            SELECT s.active_product_id
              FROM user_subscription s
              JOIN payment_product p ON p.product_id = s.active_product_id AND p.app_key = \(appKey)
             WHERE s.user_id = \(userID) AND p.subscription_group_id = \(group)
               AND \(fragment: Self.statusNow) = ANY(\(PostgresArray(serving))::text[]) AND NOT s.is_family_shared
             ORDER BY s.expires_at DESC NULLS FIRST LIMIT 1
            """
        ).first?.decode("active_product_id")
    }

    /// The result of a submitted transaction for `userID`: the order `orderNo`, the
    /// subscription of the transaction's chain, the user's balance.
    public func purchaseResult(transactionID: String, environment: String, orderNo: String?, userID: String) async throws
        -> PurchaseResult
    {
        let rows = try await pool.query(
            """
            SELECT o.order_no, o.status AS order_status, \(fragment: Self.statusNow) AS subscription_status, s.active_product_id, s.expires_at,
                   s.user_id AS chain_owner,
                   (SELECT least(coalesce(sum(balance), 0), 9223372036854775807)::bigint FROM credit_account WHERE user_id = \(userID)) AS balance
              FROM (SELECT 1) AS one
              LEFT JOIN payment_order o ON o.order_no = \(orderNo)
              LEFT JOIN apple_transaction t ON t.environment = \(environment) AND t.transaction_id = \(transactionID)
              LEFT JOIN user_subscription s ON s.environment = t.environment AND s.original_transaction_id = t.original_transaction_id
            """)
        let row = rows[0]
        return PurchaseResult(
            orderNo: try row.decode("order_no", as: String?.self),
            orderStatus: try row.decode("order_status", as: String?.self).map { try Self.value($0, "order_status") },
            subscriptionStatus: try row.decode("subscription_status", as: String?.self).map { try Self.value($0, "subscription_status") },
            activeProductID: try row.decode("active_product_id", as: String?.self),
            expiresAt: try row.decode("expires_at", as: Date?.self), balance: try row.decode("balance", as: Int64.self),
            chainOwner: try row.decode("chain_owner", as: String?.self))
    }

    /// The status of the `user_subscription` row `s` at the statement's instant (migrations 0032, 0048).
    public static let statusNow: PostgresQuery = """
        subscription_status_at(s.status, s.next_change_at, s.expires_at, s.grace_expires_at, s.in_billing_retry,
                               s.auto_renew_enabled, s.commitment_ends_at, now())
        """

    private static func value<T: RawRepresentable>(_ raw: String, _ column: String) throws -> T where T.RawValue == String {
        guard let value = T(rawValue: raw) else {
            throw PostgresError.decoding(column: column, reason: "a value \(T.self) does not know")
        }
        return value
    }
}
