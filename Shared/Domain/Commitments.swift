import Foundation

/// How Apple bills a subscription's period (`billingPlanType`); the catalogue states it per product.
public enum BillingPlan: String, Sendable, Hashable, Codable, CaseIterable {
    /// The whole period is charged when it starts.
    case billedUpfront = "BILLED_UPFRONT"
    /// A 12-month commitment charged month by month: each charge is a transaction of its own.
    case monthly = "MONTHLY"
}

/// A transaction's billing plan and place in its commitment (Apple's `billingPlanType` and `commitmentInfo`).
public struct TransactionCommitment: Sendable, Hashable, Codable {
    public var billingPlan: BillingPlan
    /// Which charge of the commitment this transaction is (1 to `totalBillingPeriods`).
    public var billingPeriodNumber: Int?
    public var totalBillingPeriods: Int?
    /// When the commitment ends: the last charge's period ends then.
    public var expiresDate: Date?
    /// Milliunits of the transaction's currency.
    public var price: Int64?

    public init(
        billingPlan: BillingPlan, billingPeriodNumber: Int? = nil, totalBillingPeriods: Int? = nil, expiresDate: Date? = nil,
        price: Int64? = nil
    ) {
        self.billingPlan = billingPlan
        self.billingPeriodNumber = billingPeriodNumber
        self.totalBillingPeriods = totalBillingPeriods
        self.expiresDate = expiresDate
        self.price = price
    }
}

/// What a commitment renews into when it ends (Apple's `renewalBillingPlanType` and `commitmentInfo` of a renewal info).
public struct RenewalCommitment: Sendable, Hashable, Codable {
    /// How the next period is billed.
    public var billingPlan: BillingPlan?
    public var autoRenewProductID: String?
    /// Whether a new commitment (or plan) follows this one (`commitmentAutoRenewStatus`); nil: Apple did not say.
    public var autoRenewEnabled: Bool?
    public var renewalBillingPlan: BillingPlan?
    public var renewalDate: Date?
    /// Milliunits of the renewal info's currency.
    public var renewalPrice: Int64?

    public init(
        billingPlan: BillingPlan? = nil, autoRenewProductID: String? = nil, autoRenewEnabled: Bool? = nil,
        renewalBillingPlan: BillingPlan? = nil, renewalDate: Date? = nil, renewalPrice: Int64? = nil
    ) {
        self.billingPlan = billingPlan
        self.autoRenewProductID = autoRenewProductID
        self.autoRenewEnabled = autoRenewEnabled
        self.renewalBillingPlan = renewalBillingPlan
        self.renewalDate = renewalDate
        self.renewalPrice = renewalPrice
    }
}

/// The rules of monthly plans with a 12-month commitment, as pure functions of the facts and `now`.
///
/// The subscriber agrees to twelve monthly charges. Each charge is a transaction paying one month,
/// so it grants that month's credits exactly as a monthly plan's renewal does. Turning auto-renew
/// off during the commitment does not stop the remaining charges: it only means no new period
/// follows the commitment, so the plan stays active to the commitment's end. After the last
/// charge (or once the commitment is over) a subscription expires as any other does. A refund
/// revokes the charge Apple refunded (that month), never the months already paid and used.
public enum CommitmentRules {
    /// Where a chain stands against its commitment.
    public enum Standing: Sendable, Equatable {
        /// Not billed monthly under a commitment: periods renew and end as any subscription's.
        case notCommitted
        /// Charges remain before `ends`: Apple bills them whatever auto-renew says.
        case committed(ends: Date)
        /// The last charge's month (or later): auto-renew decides what follows, as for any plan.
        case finalPeriod(ends: Date)
    }

    /// Where the chain whose latest transaction is `latest` stands at `now`.
    public static func standing(of latest: TransactionFact, now: Date) -> Standing {
        guard let commitment = latest.commitment, commitment.billingPlan == .monthly, let ends = commitment.expiresDate else {
            return .notCommitted
        }
        if let number = commitment.billingPeriodNumber, let total = commitment.totalBillingPeriods, number >= total {
            return .finalPeriod(ends: ends)
        }
        // A period reaching the commitment's end is its last one, whatever the counters say.
        if let expires = latest.expiresDate, expires >= ends { return .finalPeriod(ends: ends) }
        return now < ends ? .committed(ends: ends) : .finalPeriod(ends: ends)
    }

    /// Whether a new period follows the commitment: Apple's commitment switch
    /// (`commitmentAutoRenewStatus`), else the plan's auto-renew, else (no renewal info yet) yes.
    public static func renewsAfterCommitment(_ renewal: RenewalFact?) -> Bool {
        renewal?.commitment?.autoRenewEnabled ?? renewal?.autoRenewEnabled ?? true
    }

    /// Whether another charge is expected after `latest`'s period: always inside a commitment (a
    /// cancellation takes effect at its end), otherwise as the renewal info says.
    public static func renews(latest: TransactionFact, renewal: RenewalFact?, now: Date) -> Bool {
        switch standing(of: latest, now: now) {
        case .committed: true
        case .finalPeriod: renewsAfterCommitment(renewal)
        case .notCommitted: renewal?.autoRenewEnabled ?? true
        }
    }

    /// When the subscriber's access ends if nothing else happens (nil: it renews): the
    /// commitment's end for a plan cancelled during its commitment, else the paid period's end.
    public static func plannedEnd(latest: TransactionFact, renewal: RenewalFact?, now: Date) -> Date? {
        switch standing(of: latest, now: now) {
        case .committed(let ends): renewsAfterCommitment(renewal) ? nil : ends
        case .finalPeriod: renewsAfterCommitment(renewal) ? nil : latest.expiresDate
        case .notCommitted: renewal?.autoRenewEnabled ?? true ? nil : latest.expiresDate
        }
    }

    /// The commitment's end when Apple still takes charges after `latest`'s period (nil: its period is
    /// the commitment's last, or no commitment). Until then the period's end is not the plan's end,
    /// whatever auto-renew says, so the chain awaits the next charge (`SubscriptionTimeline.renews`).
    /// Needs no `now`: whether a period is followed by a committed charge is fixed by its facts.
    public static func remainingChargesEnd(after latest: TransactionFact) -> Date? {
        guard let commitment = latest.commitment, commitment.billingPlan == .monthly, let ends = commitment.expiresDate,
            let expires = latest.expiresDate, expires < ends
        else { return nil }
        if let number = commitment.billingPeriodNumber, let total = commitment.totalBillingPeriods, number >= total {
            return nil
        }
        return ends
    }

    /// Whether a charge is due after a period ending at `periodEnd` of a chain whose stored
    /// commitment ends at `commitmentEndsAt`: Apple bills it whatever auto-renew says.
    public static func chargeFollows(periodEnd: Date?, commitmentEndsAt: Date?) -> Bool {
        guard let periodEnd, let commitmentEndsAt else { return false }
        return periodEnd < commitmentEndsAt
    }

    /// Whether a transaction is one month's charge of a commitment plan: it pays (and grants) one
    /// month, never the product's whole year month by month.
    public static func isMonthlyCharge(_ transaction: TransactionFact) -> Bool {
        transaction.commitment?.billingPlan == .monthly
    }

    /// Whether `transaction` was billed as `product`'s catalogue says; a mismatch means the
    /// catalogue is out of date with App Store Connect and an operator should look.
    public static func matchesCatalogue(_ transaction: TransactionFact, product: CatalogueProduct) -> Bool {
        (transaction.commitment?.billingPlan ?? .billedUpfront) == product.billingPlan
    }
}
