import Foundation

/// Entitlement state of a chain, as Apple's renewal states map onto the business.
public enum SubscriptionStatus: String, Sendable, Codable, CaseIterable {
    case active = "ACTIVE"
    case grace = "GRACE"
    case billingRetry = "BILLING_RETRY"
    case expired = "EXPIRED"
    case revoked = "REVOKED"

    /// Whether the user gets the paid service (Apple: subscribed and in grace do; the rest don't).
    public var hasService: Bool { self == .active || self == .grace }
}

/// The `user_subscription` row of a chain, computed from its facts and the clock alone.
public struct SubscriptionState: Sendable, Hashable, Codable {
    public var originalTransactionID: String
    public var environment: String
    public var activeProductID: String
    public var pendingProductID: String?
    public var status: SubscriptionStatus
    public var autoRenewEnabled: Bool
    public var expiresAt: Date?
    public var graceExpiresAt: Date?
    public var lastTransactionID: String
    public var lastSignedDate: Date
    public var isFamilyShared: Bool

    public init(
        originalTransactionID: String, environment: String, activeProductID: String, pendingProductID: String?,
        status: SubscriptionStatus, autoRenewEnabled: Bool, expiresAt: Date?, graceExpiresAt: Date?,
        lastTransactionID: String, lastSignedDate: Date, isFamilyShared: Bool
    ) {
        self.originalTransactionID = originalTransactionID
        self.environment = environment
        self.activeProductID = activeProductID
        self.pendingProductID = pendingProductID
        self.status = status
        self.autoRenewEnabled = autoRenewEnabled
        self.expiresAt = expiresAt
        self.graceExpiresAt = graceExpiresAt
        self.lastTransactionID = lastTransactionID
        self.lastSignedDate = lastSignedDate
        self.isFamilyShared = isFamilyShared
    }

    /// The chain's key in status history: `environment:originalTransactionId`.
    public var historyKey: String { "\(environment):\(originalTransactionID)" }
}

/// The projection: because it reads only stored facts and the clock, recomputing it after every
/// fact makes arrival order irrelevant, and replaying the facts rebuilds the same rows.
public enum SubscriptionProjection {
    public static func project(_ facts: ChainFacts, now: Date) -> SubscriptionState? {
        guard let current = currentTransaction(of: facts.transactions) else { return nil }
        let renewal = facts.renewal
        let expiresAt = current.expiresDate
        let status: SubscriptionStatus
        if current.revocationDate != nil {
            status = .revoked
        } else if let expiresAt, expiresAt > now {
            status = .active
        } else if expiresAt == nil {
            status = .active  // a non-expiring product: entitled until revoked
        } else if let grace = renewal?.gracePeriodExpiresDate, grace > now, grace > (expiresAt ?? .distantPast) {
            status = .grace
        } else if renewal?.isInBillingRetryPeriod == true {
            status = .billingRetry
        } else {
            status = .expired
        }
        let pending = renewal?.autoRenewProductID.flatMap { $0 == current.productID ? nil : $0 }
        let lastSigned = ([current.signedDate] + (renewal.map { [$0.signedDate] } ?? [])).max()!
        return SubscriptionState(
            originalTransactionID: current.originalTransactionID, environment: current.environment,
            activeProductID: current.productID, pendingProductID: status == .revoked ? nil : pending,
            status: status, autoRenewEnabled: renewal?.autoRenewEnabled ?? (status != .revoked),
            expiresAt: expiresAt,
            graceExpiresAt: status == .grace ? renewal?.gracePeriodExpiresDate : nil,
            lastTransactionID: current.transactionID, lastSignedDate: lastSigned,
            isFamilyShared: current.isFamilyShared)
    }

    /// The transaction that defines the current period: the latest purchase that was not
    /// replaced by an upgrade. A deterministic maximum, so the order facts arrived in never matters.
    public static func currentTransaction(of transactions: [TransactionFact]) -> TransactionFact? {
        let candidates = transactions.filter { !$0.isUpgraded }
        return (candidates.isEmpty ? transactions : candidates).max { a, b in
            (a.purchaseDate, a.expiresDate ?? .distantPast, a.transactionID)
                < (b.purchaseDate, b.expiresDate ?? .distantPast, b.transactionID)
        }
    }
}
