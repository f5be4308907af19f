/// How long one paid period of a product lasts.
public enum ProductDuration: String, Sendable, Codable {
    case month = "MONTH"
    case year = "YEAR"
}

/// How an upgrade grants credits.
public enum UpgradeGrant: String, Sendable, Codable {
    /// The new plan's full period amount.
    case full = "FULL"
    /// Only what the new plan gives beyond the old one.
    case difference = "DIFFERENCE"
}

/// A product of the catalogue with its per-product credit rules (data, never hard-coded).
public struct CatalogueProduct: Sendable, Hashable, Codable {
    public var productID: String
    public var subscriptionGroupID: String
    public var planCode: String
    /// Apple's level inside the group: 1 is the highest.
    public var planLevel: Int
    public var duration: ProductDuration
    /// Credits per entitlement period (per month for yearly plans), in whole credits.
    public var creditsAmount: Int64
    public var enabled: Bool
    public var trialGrantsCredits: Bool
    public var upgradeGrant: UpgradeGrant
    public var familySharedGrantsCredits: Bool

    public init(
        productID: String, subscriptionGroupID: String, planCode: String, planLevel: Int, duration: ProductDuration,
        creditsAmount: Int64, enabled: Bool = true, trialGrantsCredits: Bool = true, upgradeGrant: UpgradeGrant = .full,
        familySharedGrantsCredits: Bool = false
    ) {
        self.productID = productID
        self.subscriptionGroupID = subscriptionGroupID
        self.planCode = planCode
        self.planLevel = planLevel
        self.duration = duration
        self.creditsAmount = creditsAmount
        self.enabled = enabled
        self.trialGrantsCredits = trialGrantsCredits
        self.upgradeGrant = upgradeGrant
        self.familySharedGrantsCredits = familySharedGrantsCredits
    }
}

/// How a product relates to the plan a user has now (Apple's rules decide when it takes effect).
public enum PlanRelation: String, Sendable, Codable {
    case current = "CURRENT"
    /// Higher level: takes effect at once with a new transaction.
    case upgrade = "UPGRADE"
    /// Lower level: takes effect at the next renewal.
    case downgrade = "DOWNGRADE"
    /// Same level, other period: takes effect at the next renewal.
    case crossgrade = "CROSSGRADE"
    /// No current plan in this product's group.
    case new = "NEW"

    public static func between(current: CatalogueProduct?, candidate: CatalogueProduct) -> PlanRelation {
        guard let current, current.subscriptionGroupID == candidate.subscriptionGroupID else { return .new }
        if current.productID == candidate.productID { return .current }
        if candidate.planLevel < current.planLevel { return .upgrade }
        if candidate.planLevel > current.planLevel { return .downgrade }
        return .crossgrade
    }

    /// Whether Apple applies the change immediately (a new transaction) or at the next renewal.
    public var takesEffectNow: Bool { self == .upgrade || self == .new }
}
