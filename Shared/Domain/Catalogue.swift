/// How long one paid period of a product lasts, as App Store Connect lists it (ISO 8601).
public enum ProductDuration: String, Sendable, Codable, CaseIterable {
    case week = "P1W"
    case month = "P1M"
    case twoMonths = "P2M"
    case threeMonths = "P3M"
    case sixMonths = "P6M"
    case year = "P1Y"

    /// Reads a duration, also in the spellings catalogues used before ISO 8601 (`MONTH`, `YEAR`).
    public init?(catalogueValue value: String) {
        switch value {
        case "MONTH": self = .month
        case "YEAR": self = .year
        default: self.init(rawValue: value)
        }
    }

    public init(from decoder: any Decoder) throws {
        let value = try decoder.singleValueContainer().decode(String.self)
        guard let duration = ProductDuration(catalogueValue: value) else {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(codingPath: decoder.codingPath, debugDescription: "not a duration: \(value)"))
        }
        self = duration
    }

    /// Months in one period; nil for a weekly plan, which grants per paid week instead.
    public var months: Int? {
        switch self {
        case .week: nil
        case .month: 1
        case .twoMonths: 2
        case .threeMonths: 3
        case .sixMonths: 6
        case .year: 12
        }
    }

    /// Whether one period grants month by month (its first month at purchase, the rest on the anchor day).
    public var grantsMonthly: Bool { (months ?? 0) > 1 }
}

/// How an upgrade grants credits.
public enum UpgradeGrant: String, Sendable, Codable {
    /// The new plan's full period amount.
    case full = "FULL"
    /// Only what the new plan gives beyond the old one.
    case difference = "DIFFERENCE"
}

/// What a product's consumption answers tell Apple about a refund request (`refundPreference`).
public enum RefundPreference: String, Sendable, Hashable, Codable, CaseIterable {
    case decline = "DECLINE"
    case grantFull = "GRANT_FULL"
    case grantProrated = "GRANT_PRORATED"
}

/// Apple's offer types (`offerType`).
public enum OfferKind: Int, Sendable, Hashable, Codable, CaseIterable, CodingKeyRepresentable {
    /// Free trial, pay as you go or pay up front, once per subscription group.
    case introductory = 1
    case promotional = 2
    case offerCode = 3
    case winBack = 4

    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int?
        init(stringValue: String) { (self.stringValue, intValue) = (stringValue, Int(stringValue)) }
        init(intValue: Int) { (stringValue, self.intValue) = ("\(intValue)", intValue) }
    }

    /// Keyed by Apple's number (`{"3": false}`), so rules keyed by kind are a JSON object.
    public var codingKey: any CodingKey { Key(intValue: rawValue) }

    public init?<T: CodingKey>(codingKey: T) {
        guard let value = codingKey.intValue ?? Int(codingKey.stringValue) else { return nil }
        self.init(rawValue: value)
    }

    /// The name of the kind in catalogue files.
    public var catalogueName: String {
        switch self {
        case .introductory: "INTRODUCTORY"
        case .promotional: "PROMOTIONAL"
        case .offerCode: "OFFER_CODE"
        case .winBack: "WIN_BACK"
        }
    }
}

/// What Apple sells a product as (App Store Connect's in-app purchase types this service handles).
public enum ProductKind: String, Sendable, Hashable, Codable, CaseIterable {
    /// A plan of a subscription group, renewing every period; grants SUBSCRIPTION credits.
    case autoRenewable = "AUTO_RENEWABLE"
    /// A credit pack, bought as often as wanted; each purchase grants PERMANENT credits once.
    case consumable = "CONSUMABLE"
}

/// A product of the catalogue with its per-product credit rules (data, never hard-coded).
/// A consumable has no group, level or duration: it is stored with an empty group, level 1 and
/// `P1M`, which nothing reads for it.
public struct CatalogueProduct: Sendable, Hashable, Codable {
    public var productID: String
    public var kind: ProductKind
    /// Whole PERMANENT credits one purchase of a consumable grants (0 for subscriptions).
    public var permanentCredits: Int64
    public var subscriptionGroupID: String
    public var planCode: String
    /// Apple's level inside the group: 1 is the highest.
    public var planLevel: Int
    public var duration: ProductDuration
    /// Credits per month (per week for weekly plans), in whole credits.
    public var creditsAmount: Int64
    public var enabled: Bool
    public var trialGrantsCredits: Bool
    public var upgradeGrant: UpgradeGrant
    public var familySharedGrantsCredits: Bool
    /// Whether a free period of a promotional, offer-code or win-back offer grants credits; a kind
    /// left out follows `trialGrantsCredits` (which decides for introductory free trials).
    public var freePeriodGrantsCredits: [OfferKind: Bool]
    /// Whether the subscription pool stays spendable while Apple retries a failed renewal.
    public var billingRetrySpendsCredits: Bool
    /// Sent with consumption answers for this product; nil sends no preference.
    public var refundPreference: RefundPreference?
    /// What the product unlocks (`[a-z0-9_.-]{1,64}` each); a catalogue that names none unlocks the plan code.
    public var entitlements: [String]
    /// The promotional offers the app may ask signatures for, with who may get each.
    public var offers: [CatalogueOffer]
    /// Whether the product has an introductory offer the app may ask an eligibility signature for.
    public var introductoryOffer: Bool
    /// How Apple bills the product: up front, or `MONTHLY` over a 12-month commitment (a `P1Y` product).
    public var billingPlan: BillingPlan
    /// What to show a subscriber about to cancel (Retention Messaging), first fitting rule first.
    public var retentionMessages: [RetentionRule]

    public init(
        productID: String, subscriptionGroupID: String, planCode: String, planLevel: Int, duration: ProductDuration,
        creditsAmount: Int64, enabled: Bool = true, trialGrantsCredits: Bool = true, upgradeGrant: UpgradeGrant = .full,
        familySharedGrantsCredits: Bool = false, freePeriodGrantsCredits: [OfferKind: Bool] = [:],
        billingRetrySpendsCredits: Bool = false, refundPreference: RefundPreference? = nil, kind: ProductKind = .autoRenewable,
        permanentCredits: Int64 = 0, entitlements: [String]? = nil, offers: [CatalogueOffer] = [], introductoryOffer: Bool = false,
        billingPlan: BillingPlan = .billedUpfront, retentionMessages: [RetentionRule] = []
    ) {
        self.billingPlan = billingPlan
        self.productID = productID
        self.kind = kind
        self.permanentCredits = permanentCredits
        self.subscriptionGroupID = subscriptionGroupID
        self.planCode = planCode
        self.planLevel = planLevel
        self.duration = duration
        self.creditsAmount = creditsAmount
        self.enabled = enabled
        self.trialGrantsCredits = trialGrantsCredits
        self.upgradeGrant = upgradeGrant
        self.familySharedGrantsCredits = familySharedGrantsCredits
        self.freePeriodGrantsCredits = freePeriodGrantsCredits
        self.billingRetrySpendsCredits = billingRetrySpendsCredits
        self.refundPreference = refundPreference
        self.entitlements = entitlements ?? [planCode]
        self.offers = offers
        self.introductoryOffer = introductoryOffer
        self.retentionMessages = retentionMessages
    }

    /// Decoded as encoded, except that a product written without `entitlements` (a snapshot made
    /// before they existed, or a statement that does not select them) unlocks its plan code, as
    /// a catalogue naming none does; one written without offers has none, one without a billing
    /// plan is billed up front.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            productID: try container.decode(String.self, forKey: .productID),
            subscriptionGroupID: try container.decode(String.self, forKey: .subscriptionGroupID),
            planCode: try container.decode(String.self, forKey: .planCode), planLevel: try container.decode(Int.self, forKey: .planLevel),
            duration: try container.decode(ProductDuration.self, forKey: .duration),
            creditsAmount: try container.decode(Int64.self, forKey: .creditsAmount),
            enabled: try container.decode(Bool.self, forKey: .enabled),
            trialGrantsCredits: try container.decode(Bool.self, forKey: .trialGrantsCredits),
            upgradeGrant: try container.decode(UpgradeGrant.self, forKey: .upgradeGrant),
            familySharedGrantsCredits: try container.decode(Bool.self, forKey: .familySharedGrantsCredits),
            freePeriodGrantsCredits: try container.decode([OfferKind: Bool].self, forKey: .freePeriodGrantsCredits),
            billingRetrySpendsCredits: try container.decode(Bool.self, forKey: .billingRetrySpendsCredits),
            refundPreference: try container.decodeIfPresent(RefundPreference.self, forKey: .refundPreference),
            kind: try container.decode(ProductKind.self, forKey: .kind),
            permanentCredits: try container.decode(Int64.self, forKey: .permanentCredits),
            entitlements: try container.decodeIfPresent([String].self, forKey: .entitlements),
            offers: try container.decodeIfPresent([CatalogueOffer].self, forKey: .offers) ?? [],
            introductoryOffer: try container.decodeIfPresent(Bool.self, forKey: .introductoryOffer) ?? false,
            billingPlan: try container.decodeIfPresent(BillingPlan.self, forKey: .billingPlan) ?? .billedUpfront,
            retentionMessages: try container.decodeIfPresent([RetentionRule].self, forKey: .retentionMessages) ?? [])
    }

    /// A credit pack: `permanentCredits` per purchase, no group, level or duration.
    public static func consumable(
        productID: String, planCode: String, permanentCredits: Int64, enabled: Bool = true,
        refundPreference: RefundPreference? = nil
    ) -> CatalogueProduct {
        CatalogueProduct(
            productID: productID, subscriptionGroupID: "", planCode: planCode, planLevel: 1, duration: .month, creditsAmount: 0,
            enabled: enabled, refundPreference: refundPreference, kind: .consumable, permanentCredits: permanentCredits)
    }

    /// Whether a free period of this offer kind grants the product's credits.
    public func freePeriodGrants(_ kind: OfferKind) -> Bool {
        kind == .introductory ? trialGrantsCredits : freePeriodGrantsCredits[kind] ?? trialGrantsCredits
    }
}

/// How a product relates to the plan a user has now.
public enum PlanRelation: String, Sendable, Codable {
    case current = "CURRENT"
    /// Higher level: takes effect at once with a new transaction.
    case upgrade = "UPGRADE"
    /// Lower level: takes effect at the next renewal.
    case downgrade = "DOWNGRADE"
    /// Same level: at once for the same duration, else at the next renewal.
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
}

/// When Apple applies a change of plan (App Store Connect's "upgrade, downgrade and crossgrade" rules).
public enum ChangeTiming: String, Sendable, Codable {
    /// At once: a new transaction replaces the current one, whose unused time Apple refunds.
    case now = "NOW"
    /// At the next renewal: the current period runs out first.
    case nextRenewal = "NEXT_RENEWAL"

    /// Nil for the current product itself. A higher level and the same level with the same
    /// duration change now; a lower level and the same level with another duration at renewal.
    public static func of(current: CatalogueProduct?, candidate: CatalogueProduct) -> ChangeTiming? {
        switch PlanRelation.between(current: current, candidate: candidate) {
        case .current: nil
        case .new: .now
        case .upgrade, .downgrade, .crossgrade:
            between(
                currentLevel: current?.planLevel ?? candidate.planLevel, currentDuration: current?.duration ?? candidate.duration,
                candidateLevel: candidate.planLevel, candidateDuration: candidate.duration)
        }
    }

    /// The timing of a change between two different plans of one group, from Apple's levels (1 is
    /// the highest) and the plans' durations.
    public static func between(
        currentLevel: Int, currentDuration: ProductDuration, candidateLevel: Int, candidateDuration: ProductDuration
    ) -> ChangeTiming {
        if candidateLevel != currentLevel { return candidateLevel < currentLevel ? .now : .nextRenewal }
        return candidateDuration == currentDuration ? .now : .nextRenewal
    }
}
