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
    /// The end of the grace period Apple gave for the current period's renewal, kept from the
    /// failure on (it may come before the period ends), not only while in grace.
    public var graceExpiresAt: Date?
    public var lastTransactionID: String
    public var lastSignedDate: Date
    public var isFamilyShared: Bool
    /// Apple is retrying the current period's renewal (the failure may come before the period ends).
    public var inBillingRetry: Bool
    /// The next moment `status` changes by the clock alone (nil: only a fact changes it).
    public var nextChangeAt: Date?
    /// The end of the monthly-billed commitment when charges of it remain after the current period
    /// (`CommitmentRules.remainingChargesEnd`): until then auto-renew off does not end the plan.
    public var commitmentEndsAt: Date?

    public init(
        originalTransactionID: String, environment: String, activeProductID: String, pendingProductID: String?,
        status: SubscriptionStatus, autoRenewEnabled: Bool, expiresAt: Date?, graceExpiresAt: Date?,
        lastTransactionID: String, lastSignedDate: Date, isFamilyShared: Bool, inBillingRetry: Bool = false,
        nextChangeAt: Date? = nil, commitmentEndsAt: Date? = nil
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
        self.inBillingRetry = inBillingRetry
        self.nextChangeAt = nextChangeAt
        self.commitmentEndsAt = commitmentEndsAt
    }

    /// Whether another period is expected while the chain serves: what `willRenew` reports.
    public var willRenew: Bool { timeline.renews && status.hasService }

    /// The facts of the row that decide its status at any instant.
    public var timeline: SubscriptionTimeline {
        SubscriptionTimeline(
            revoked: status == .revoked, expiresAt: expiresAt, graceExpiresAt: graceExpiresAt, inBillingRetry: inBillingRetry,
            autoRenewEnabled: autoRenewEnabled, commitmentEndsAt: commitmentEndsAt)
    }

    /// The row as it stands at `now`: its status then and the next moment it changes.
    public func advanced(to now: Date) -> SubscriptionState {
        var state = self
        state.status = timeline.status(at: now)
        state.nextChangeAt = timeline.nextChange(after: now)
        return state
    }

    /// The chain's key in status history: `environment:originalTransactionId`.
    public var historyKey: String { "\(environment):\(originalTransactionID)" }
}

/// The facts of a chain's current period that decide its status at any instant: a row is
/// recomputed when a fact arrives, but its status also changes between facts (the period ends,
/// the grace period ends, Apple's retries end), so every reader and the clock job ask this.
public struct SubscriptionTimeline: Sendable, Hashable {
    public var revoked: Bool
    public var expiresAt: Date?
    public var graceExpiresAt: Date?
    public var inBillingRetry: Bool
    public var autoRenewEnabled: Bool
    /// See `SubscriptionState.commitmentEndsAt`.
    public var commitmentEndsAt: Date?

    /// How long after the period's end Apple keeps retrying a failed renewal (60 days); the chain
    /// is EXPIRED after it without a word from Apple.
    public static let billingRetryWindow: TimeInterval = 60 * 86_400

    public init(
        revoked: Bool, expiresAt: Date?, graceExpiresAt: Date?, inBillingRetry: Bool, autoRenewEnabled: Bool,
        commitmentEndsAt: Date? = nil
    ) {
        self.revoked = revoked
        self.expiresAt = expiresAt
        self.graceExpiresAt = graceExpiresAt
        self.inBillingRetry = inBillingRetry
        self.autoRenewEnabled = autoRenewEnabled
        self.commitmentEndsAt = commitmentEndsAt
    }

    /// Whether the period's end awaits another charge: auto-renew is on, or a commitment's charges
    /// remain (Apple takes them though the subscriber turned auto-renew off; the plan ends with
    /// the commitment).
    public var renews: Bool {
        autoRenewEnabled || CommitmentRules.chargeFollows(periodEnd: expiresAt, commitmentEndsAt: commitmentEndsAt)
    }

    /// The status at `now`. The SQL function `subscription_status_at` (migrations 0032, 0048) is the same
    /// rule, tested against this one.
    public func status(at now: Date) -> SubscriptionStatus {
        if revoked { return .revoked }
        // A non-expiring product: entitled until revoked.
        guard let expiresAt, expiresAt <= now else { return .active }
        // Nothing renews: nothing is retried, the period's end is the end.
        guard renews else { return .expired }
        if let graceExpiresAt, graceExpiresAt > now { return .grace }
        if inBillingRetry, now < expiresAt + Self.billingRetryWindow { return .billingRetry }
        return .expired
    }

    /// The first moment after `now` at which `status(at:)` differs from `status(at: now)`; nil
    /// when only a fact can change it.
    public func nextChange(after now: Date) -> Date? {
        guard !revoked, let expiresAt else { return nil }
        let current = status(at: now)
        let moments = [expiresAt, graceExpiresAt, expiresAt + Self.billingRetryWindow].compactMap { $0 }
        return moments.filter { $0 > now }.sorted().first { status(at: $0) != current }
    }

    /// The status of a stored row at `now`: the stored one until its next change, the rule's after
    /// it. A row written without a next change (before migration 0032 knew it) keeps its status.
    public func status(at now: Date, stored: SubscriptionStatus, nextChangeAt: Date?) -> SubscriptionStatus {
        guard let nextChangeAt, nextChangeAt <= now else { return stored }
        return status(at: now)
    }
}

/// The projection: because it reads only stored facts and the clock, recomputing it after every
/// fact makes arrival order irrelevant, and replaying the facts rebuilds the same rows.
public enum SubscriptionProjection {
    public static func project(_ facts: ChainFacts, now: Date) -> SubscriptionState? {
        guard let current = currentTransaction(of: facts.transactions) else { return nil }
        let renewal = facts.renewal
        let expiresAt = current.expiresDate
        let revoked = current.revocationDate != nil
        // Renewal info signed before the current period began speaks of an earlier period.
        let aboutThisPeriod = renewal.map { $0.signedDate >= current.purchaseDate } ?? false
        let autoRenew = renewal?.autoRenewEnabled ?? !revoked
        let commitmentEnd = revoked ? nil : CommitmentRules.remainingChargesEnd(after: current)
        let renews = autoRenew || commitmentEnd != nil
        // Apple may give the grace date before the period ends (it tries the renewal early): kept
        // from then on, so the grace starts at the expiry without another fact.
        let grace = renewal?.gracePeriodExpiresDate.flatMap { grace in
            !revoked && renews && grace > (expiresAt ?? .distantFuture) ? grace : nil
        }
        let inRetry = !revoked && aboutThisPeriod && renewal?.isInBillingRetryPeriod == true
        let timeline = SubscriptionTimeline(
            revoked: revoked, expiresAt: expiresAt, graceExpiresAt: grace, inBillingRetry: inRetry, autoRenewEnabled: autoRenew,
            commitmentEndsAt: commitmentEnd)
        let status = timeline.status(at: now)
        let pending = renewal?.autoRenewProductID.flatMap { $0 == current.productID ? nil : $0 }
        let lastSigned = ([current.signedDate] + (renewal.map { [$0.signedDate] } ?? [])).max()!
        return SubscriptionState(
            originalTransactionID: current.originalTransactionID, environment: current.environment,
            activeProductID: current.productID, pendingProductID: revoked ? nil : pending,
            status: status, autoRenewEnabled: autoRenew, expiresAt: expiresAt, graceExpiresAt: grace,
            lastTransactionID: current.transactionID, lastSignedDate: lastSigned, isFamilyShared: current.isFamilyShared,
            inBillingRetry: inRetry, nextChangeAt: timeline.nextChange(after: now), commitmentEndsAt: commitmentEnd)
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
