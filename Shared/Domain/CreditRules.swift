import Foundation

/// Integer micro-credits: fractional usage stays exact, and no floating point touches money.
public typealias MicroCredits = Int64

public enum Credits {
    public static let micro: MicroCredits = 1_000_000
    /// Whole credits in micro-credits, saturating at the 64-bit range. Every amount it is given is
    /// bounded first (catalogue amounts and `WELCOME_CREDITS` at 10⁹): saturation only guards a
    /// hand-edited row, and a saturated amount is above `CreditLimits.maxBalance`, so the ledger
    /// refuses it instead of booking a wrong figure.
    public static func micro(_ whole: Int64) -> MicroCredits {
        let (value, overflow) = whole.multipliedReportingOverflow(by: micro)
        return overflow ? (whole < 0 ? .min : .max) : value
    }
    /// Whole credits available, rounded down (a partial credit is not spendable as a whole one).
    public static func whole(_ micro: MicroCredits) -> Int64 { micro / Self.micro }

    /// Micro-credits as an exact decimal string of credits without trailing zeros: 1_500_000 → "1.5".
    public static func decimal(_ micro: MicroCredits) -> String {
        let magnitude = micro.magnitude
        let whole = magnitude / UInt64(Self.micro)
        let fraction = magnitude % UInt64(Self.micro)
        var text = String(whole)
        if fraction != 0 {
            let digits = String(fraction)
            let padded = String(repeating: "0", count: 6 - digits.count) + digits
            text += "." + padded.reversed().drop(while: { $0 == "0" }).reversed()
        }
        return micro < 0 ? "-" + text : text
    }

    /// The sum of balances for comparing with a cost or showing a total, saturating at the 64-bit
    /// range: pools are bounded by `CreditLimits` so the sum fits, but a balance written before the
    /// bounds existed must not trap a reader.
    public static func total<S: Sequence>(_ amounts: S) -> MicroCredits where S.Element == MicroCredits {
        amounts.reduce(0) { sum, value in
            let (added, overflow) = sum.addingReportingOverflow(value)
            return overflow ? (value < 0 ? .min : .max) : added
        }
    }
}

/// The largest balance a pool may hold and the largest manual adjustment (`CREDITS_MAX_BALANCE`,
/// `CREDITS_MAX_ADJUSTMENT`, in whole credits), so that no sum of credits can leave the 64-bit
/// range: three pools at the largest maximum (10¹² credits, 10¹⁸ micro-credits) still add up
/// below 2⁶³.
public struct CreditLimits: Sendable, Hashable {
    /// The largest maximum a setting may name, in whole credits.
    public static let ceiling: Int64 = 1_000_000_000_000
    /// Per pool, in micro-credits.
    public var maxBalance: MicroCredits
    /// Per adjustment, either sign, in micro-credits.
    public var maxAdjustment: MicroCredits

    /// Defaults: 10⁹ credits per pool, 10⁷ per adjustment.
    public init(maxBalanceCredits: Int64 = 1_000_000_000, maxAdjustmentCredits: Int64 = 10_000_000) {
        maxBalance = Credits.micro(min(max(maxBalanceCredits, 1), Self.ceiling))
        maxAdjustment = Credits.micro(min(max(maxAdjustmentCredits, 1), Self.ceiling))
    }

    /// Whether a pool holding `balance` may take `amount` more (a negative amount always may).
    public func allows(_ amount: MicroCredits, onto balance: MicroCredits) -> Bool {
        guard amount > 0 else { return true }
        let (after, overflow) = balance.addingReportingOverflow(amount)
        return !overflow && after <= maxBalance
    }

    /// Why an adjustment of `amount` on a pool holding `balance` is refused, or nil.
    public func adjustmentProblem(_ amount: MicroCredits, onto balance: MicroCredits) -> String? {
        if amount == .min || amount.magnitude > UInt64(maxAdjustment) {
            return "an adjustment is at most \(Credits.whole(maxAdjustment)) credits either way (CREDITS_MAX_ADJUSTMENT)"
        }
        if !allows(amount, onto: balance) {
            return "the pool would hold more than \(Credits.whole(maxBalance)) credits (CREDITS_MAX_BALANCE)"
        }
        return nil
    }
}

/// Balance pools, drawn from in this order by usage (within a pool, the lot granted first is
/// used first: `CreditRules.burn`).
public enum CreditPool: String, Sendable, Codable, CaseIterable {
    /// Period quota of a subscription; cleared after true expiry.
    case subscription = "SUBSCRIPTION"
    /// Operator-configured welcome credits, once per user.
    case welcome = "WELCOME"
    /// Purchased credits; never expire (App Review 3.1.1).
    case permanent = "PERMANENT"
}

/// A grant the processor must write; `grantKey` is unique in the database, so recomputing
/// never grants twice.
public struct GrantDecision: Sendable, Hashable {
    public var grantKey: String
    public var pool: CreditPool
    public var amount: MicroCredits
    public var reason: String

    public init(grantKey: String, pool: CreditPool, amount: MicroCredits, reason: String) {
        self.grantKey = grantKey
        self.pool = pool
        self.amount = amount
        self.reason = reason
    }
}

/// A change of plan Apple applied at once, inside a paid period.
public struct PlanChange: Sendable, Hashable {
    /// `.upgrade` or `.crossgrade` (same level, same duration).
    public var relation: PlanRelation
    /// The plans the period ran on before, latest first (several after switching back and forth).
    public var replaced: [CatalogueProduct]

    public init(relation: PlanRelation, replaced: [CatalogueProduct]) {
        self.relation = relation
        self.replaced = replaced
    }
}

/// The credit rules of domain.md, as pure functions.
public enum CreditRules {
    /// Grants owed for one verified transaction (the first month only, for plans longer than a month).
    ///
    /// - Parameter change: the immediate change of plan this transaction is, if it is one.
    public static func grants(
        for transaction: TransactionFact, product: CatalogueProduct, change: PlanChange? = nil
    ) -> [GrantDecision] {
        guard transaction.revocationDate == nil else { return [] }
        if product.kind == .consumable {
            // Once per purchase (its transaction), into the pool that never expires.
            guard product.permanentCredits > 0, !transaction.isFamilyShared else { return [] }
            return [
                GrantDecision(
                    grantKey: "purchase:\(transaction.environment):\(transaction.transactionID)", pool: .permanent,
                    amount: Credits.micro(product.permanentCredits), reason: "CONSUMABLE")
            ]
        }
        if transaction.isFamilyShared, !product.familySharedGrantsCredits { return [] }
        if transaction.isFreePeriod, let offer = transaction.offer, !product.freePeriodGrants(offer) { return [] }
        var amount = Credits.micro(product.creditsAmount)
        var reason = transaction.transactionReason == "RENEWAL" ? "RENEWAL" : "PURCHASE"
        if let change {
            // What the period has already been given is its highest plan so far: the new plan
            // adds at most the difference to it, so switching back and forth adds nothing twice.
            let given = Credits.micro(change.replaced.map(\.creditsAmount).max() ?? 0)
            if change.relation == .upgrade {
                reason = "UPGRADE"
                if product.upgradeGrant == .difference { amount = max(0, amount - given) }
            } else {
                reason = "CROSSGRADE"
                amount = max(0, amount - given)
            }
        }
        guard amount > 0 else { return [] }
        return [GrantDecision(grantKey: firstGrantKey(transaction, product: product), pool: .subscription, amount: amount, reason: reason)]
    }

    /// The key of the grant a subscription transaction earns when it is applied (its first month
    /// for periods granted month by month).
    public static func firstGrantKey(_ transaction: TransactionFact, product: CatalogueProduct) -> String {
        let months = periodMonths(
            offerDiscountType: transaction.offerDiscountType, offerPeriod: transaction.offerPeriod, duration: product.duration,
            billingPlan: transaction.commitment?.billingPlan)
        return periodGrantKey(transaction, monthIndex: (months ?? 0) > 1 ? 0 : nil)
    }

    /// The months one transaction's period grants over: a pay-up-front or free offer covers its
    /// `offerPeriod` (`P3M`, `P1Y`) in one transaction; otherwise the product's duration. Nil for
    /// periods counted in weeks or days, which grant once. A monthly charge of a commitment plan
    /// pays one month: it grants once, as a monthly plan's renewal does.
    public static func periodMonths(
        offerDiscountType: String?, offerPeriod: String?, duration: ProductDuration, billingPlan: BillingPlan? = nil
    ) -> Int? {
        if billingPlan == .monthly { return 1 }
        if offerDiscountType == "PAY_UP_FRONT" || offerDiscountType == "FREE_TRIAL", let offerPeriod {
            return months(in: offerPeriod)
        }
        return duration.months
    }

    /// Whole months of an ISO 8601 period of months or years (`P2M`, `P1Y`); nil otherwise.
    public static func months(in period: String) -> Int? {
        guard period.hasPrefix("P"), let unit = period.last, unit == "M" || unit == "Y",
            let count = Int(period.dropFirst().dropLast()), (1...120).contains(count)
        else { return nil }
        return unit == "Y" ? count * 12 : count
    }

    /// `environment:transactionId` for a period grant; `:m<index>` for the months of a longer period.
    public static func periodGrantKey(_ transaction: TransactionFact, monthIndex: Int?) -> String {
        periodGrantKey(environment: transaction.environment, transactionID: transaction.transactionID, monthIndex: monthIndex)
    }

    public static func periodGrantKey(environment: String, transactionID: String, monthIndex: Int?) -> String {
        let base = "period:\(environment):\(transactionID)"
        return monthIndex.map { "\(base):m\($0)" } ?? base
    }

    /// The grant dates of a plan of `months` months: month 0 at purchase, then each month on the
    /// anchor day (UTC, clamped to the month's last day), `months` in all, never after the period ends.
    public static func monthlyGrantDates(purchase: Date, months: Int, expires: Date?) -> [Date] {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let anchor = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: purchase)
        // The purchase date is Apple's: the calendar may not place an absurd one, and such a month
        // is then left out instead of trapping on a missing component.
        return (0..<months).compactMap { index -> Date? in
            if index == 0 { return purchase }
            guard let month = anchor.month, let anchorDay = anchor.day,
                let firstOfMonth = calendar.date(from: DateComponents(year: anchor.year, month: month + index, day: 1)),
                let days = calendar.range(of: .day, in: .month, for: firstOfMonth)?.count
            else { return nil }
            var components = calendar.dateComponents([.year, .month], from: firstOfMonth)
            components.day = min(anchorDay, days)
            components.hour = anchor.hour
            components.minute = anchor.minute
            components.second = anchor.second
            guard let date = calendar.date(from: components) else { return nil }
            if let expires, date >= expires { return nil }
            return date
        }
    }

    /// Apple's `revocationPercentage` of a full refund, in milliunits.
    public static let fullRefund = 100_000

    /// A refund takes `percentage` (Apple's milliunits; nil: a full refund) of what remains of the
    /// lot, rounded down in the user's favour, and records the refunded share the lot no longer
    /// held (spent or cleared) as unrecoverable; never another lot, never below zero. Once per lot:
    /// a second refund takes nothing. Returns what was taken.
    @discardableResult
    public static func revoke(_ lot: inout GrantRecord, percentage: Int?) -> MicroCredits {
        guard !lot.revoked else { return 0 }
        let share = min(max(percentage ?? fullRefund, 0), fullRefund)
        let taken = part(lot.remaining, milliunits: share)
        lot.unrecoverableAmount = max(0, part(lot.amount, milliunits: share) - taken)
        lot.remaining -= taken
        lot.revokedAmount = taken
        lot.revoked = true
        return taken
    }

    /// A reversed refund gives back exactly what the refund took. Returns it.
    @discardableResult
    public static func restore(_ lot: inout GrantRecord) -> MicroCredits {
        guard lot.revoked else { return 0 }
        let given = lot.revokedAmount
        lot.remaining += given
        lot.revoked = false
        lot.revokedAmount = 0
        lot.unrecoverableAmount = 0
        return given
    }

    /// A clearing at a chain's true ending takes what remains of a SUBSCRIPTION lot and remembers
    /// the ending, so that undoing it (a reversed refund) gives exactly that back. Returns it.
    @discardableResult
    public static func clear(_ lot: inout GrantRecord, ending: String) -> MicroCredits {
        let taken = lot.remaining
        guard taken > 0 else { return 0 }
        lot.remaining = 0
        lot.clearedAmount = taken
        lot.clearedBy = ending
        return taken
    }

    /// Gives back what the clearing of `ending` took from the lot (nothing if another ending cleared it).
    @discardableResult
    public static func restoreClearing(_ lot: inout GrantRecord, ending: String) -> MicroCredits {
        guard lot.clearedBy == ending else { return 0 }
        let given = lot.clearedAmount
        lot.remaining += given
        lot.clearedAmount = 0
        lot.clearedBy = nil
        return given
    }

    /// Burns `amount` from one pool's lots, given in the order they were granted: the lot granted
    /// first is used first. Returns what was burned (less than `amount` only when the lots hold
    /// less). `CreditLedger.burnLots` and the SQL function `credit_burn_lots` (migration 0022) are the same rule.
    @discardableResult
    public static func burn(_ amount: MicroCredits, from lots: inout [GrantRecord]) -> MicroCredits {
        var left = max(0, amount)
        for index in lots.indices where left > 0 {
            let take = min(left, lots[index].remaining)
            lots[index].remaining -= take
            left -= take
        }
        return max(0, amount) - left
    }

    /// A chain's true ending as the expiry clearing records it: `environment:original:last:status`.
    public static func endingKey(environment: String, originalTransactionID: String, lastTransactionID: String, status: String)
        -> String
    {
        "\(environment):\(originalTransactionID):\(lastTransactionID):\(status)"
    }

    /// `value` times `milliunits` / 100,000, rounded down, without overflowing for any balance.
    static func part(_ value: MicroCredits, milliunits: Int) -> MicroCredits {
        let scale = Int64(fullRefund)
        let share = Int64(milliunits)
        return value / scale * share + value % scale * share / scale
    }

    /// Whether the SUBSCRIPTION pool may be spent, from the user's chains (status, and whether the
    /// chain's product allows spending during billing retry): with an entitled chain (ACTIVE or
    /// GRACE), or one in retry whose product allows it, or no chain at all (what an operator
    /// credited). The SQL function `credit_subscription_spendable` (migration 0018) is the same rule.
    public static func subscriptionSpendable(chains: [(status: SubscriptionStatus, retrySpends: Bool)]) -> Bool {
        chains.isEmpty
            || chains.contains { $0.status == .active || $0.status == .grace || ($0.status == .billingRetry && $0.retrySpends) }
    }

    /// Usage drawn from the pools in order (subscription, welcome, permanent), or nil when the
    /// total cannot cover it, in which case nothing may change. A SUBSCRIPTION pool that is not
    /// spendable (billing retry) is passed over and kept.
    public static func draw(
        _ cost: MicroCredits, from balances: [CreditPool: MicroCredits], subscriptionSpendable: Bool = true
    ) -> [CreditPool: MicroCredits]? {
        // Costs are validated positive before they get here; a negative one is refused, not trapped.
        guard cost >= 0 else { return nil }
        var balances = balances
        if !subscriptionSpendable { balances[.subscription] = 0 }
        let total = Credits.total(CreditPool.allCases.map { max(0, balances[$0] ?? 0) })
        guard total >= cost else { return nil }
        var remaining = cost
        var taken: [CreditPool: MicroCredits] = [:]
        for pool in CreditPool.allCases where remaining > 0 {
            let take = min(remaining, max(0, balances[pool] ?? 0))
            if take > 0 { taken[pool] = take }
            remaining -= take
        }
        return taken
    }

    /// A day's bill: the total rounded UP to a whole credit; the difference is settled at close.
    /// Nil for a total that is negative or whose rounding leaves the 64-bit range (only a
    /// hand-edited bill: each cost is at most `CreditMeter.maximumCost`): the close sets that bill
    /// aside instead of trapping.
    public static func dailyCharge(total: MicroCredits) -> (charged: MicroCredits, rounding: MicroCredits)? {
        guard total >= 0 else { return nil }
        let rounding = (Credits.micro - total % Credits.micro) % Credits.micro
        let (charged, overflow) = total.addingReportingOverflow(rounding)
        return overflow ? nil : (charged, rounding)
    }
}
