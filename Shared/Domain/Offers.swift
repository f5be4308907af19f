import Foundation

/// Who a promotional offer of the catalogue is for, judged on the user's chains in the
/// product's subscription group.
public enum OfferAudience: String, Sendable, Hashable, Codable, CaseIterable {
    /// Every signed-in user.
    case anyone = "ANYONE"
    /// Users with a chain of the group that is paid for or being retried (retention offers).
    case subscribed = "SUBSCRIBED"
    /// Users who had the group and have no chain of it left that is paid for or being retried
    /// (win-back offers).
    case lapsed = "LAPSED"
    /// Users who never had a chain of the group.
    case newToGroup = "NEW_TO_GROUP"
}

/// A promotional offer set up in App Store Connect for a product, with who may get it.
public struct CatalogueOffer: Sendable, Hashable, Codable {
    /// The offer's identifier in App Store Connect (the JWS's `offerIdentifier`).
    public var offerIdentifier: String
    public var audience: OfferAudience

    public init(offerIdentifier: String, audience: OfferAudience) {
        self.offerIdentifier = offerIdentifier
        self.audience = audience
    }
}

/// Where a user stands in one subscription group.
public enum GroupStanding: String, Sendable, Hashable {
    /// No chain of the group, ever.
    case never = "NEVER"
    /// A chain of the group is paid for, in grace or in billing retry.
    case subscribed = "SUBSCRIBED"
    /// Chains of the group exist and every one has ended (expired or revoked).
    case lapsed = "LAPSED"

    /// The standing given the statuses (at the moment asked) of the user's chains in the group.
    public init(statuses: [SubscriptionStatus]) {
        if statuses.isEmpty {
            self = .never
        } else if statuses.contains(where: { $0.hasService || $0 == .billingRetry }) {
            self = .subscribed
        } else {
            self = .lapsed
        }
    }
}

/// The signatures StoreKit's purchase options take (Apple's "Generating JWS to sign App Store
/// requests").
public enum OfferSignatureKind: String, Sendable, Hashable, Codable, CaseIterable {
    /// A promotional offer signature V2: Apple applies the named offer to the purchase.
    case promotional = "PROMOTIONAL"
    /// An introductory offer eligibility signature: tells Apple whether to apply the product's
    /// introductory offer, overriding Apple's own once-per-group check.
    case introductoryEligibility = "INTRODUCTORY_ELIGIBILITY"
}

/// What the catalogue allows a user for one signature request.
public enum OfferDecision: Sendable, Hashable {
    /// Sign the promotional offer.
    case promotional(offerIdentifier: String)
    /// Sign the introductory offer eligibility with this answer.
    case introductory(allowed: Bool)
    /// The product is not a subscription of the catalogue, or is disabled.
    case unknownProduct
    /// The catalogue names no such offer for the product (or the product has no introductory
    /// offer; or a promotional request names no offer).
    case unknownOffer
    /// The offer exists but is for another audience than the user's standing.
    case notEligible(audience: OfferAudience, standing: GroupStanding)
}

/// The catalogue's offer rules: pure, so the route and the tests share one decision.
public enum OfferRules {
    /// What `kind` of signature for `offerIdentifier` on `product` the user may get, standing as
    /// `standing` in the product's group. An introductory offer is Apple's once per group: it is
    /// allowed only to a user who never had the group, and signed `false` for the others, so the
    /// app cannot give it twice to one of our users through two Apple Accounts.
    public static func decide(
        product: CatalogueProduct?, kind: OfferSignatureKind, offerIdentifier: String?, standing: GroupStanding
    ) -> OfferDecision {
        guard let product, product.enabled, product.kind == .autoRenewable else { return .unknownProduct }
        switch kind {
        case .introductoryEligibility:
            guard product.introductoryOffer, offerIdentifier == nil else { return .unknownOffer }
            return .introductory(allowed: standing == .never)
        case .promotional:
            guard let offerIdentifier, let offer = product.offers.first(where: { $0.offerIdentifier == offerIdentifier }) else {
                return .unknownOffer
            }
            return matches(offer.audience, standing)
                ? .promotional(offerIdentifier: offer.offerIdentifier)
                : .notEligible(audience: offer.audience, standing: standing)
        }
    }

    /// Whether an offer for `audience` is for a user standing as `standing`.
    static func matches(_ audience: OfferAudience, _ standing: GroupStanding) -> Bool {
        switch audience {
        case .anyone: true
        case .subscribed: standing == .subscribed
        case .lapsed: standing == .lapsed
        case .newToGroup: standing == .never
        }
    }
}
