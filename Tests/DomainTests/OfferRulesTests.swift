import Domain
import Testing

/// The catalogue's offer rules: a user's standing in a group from its chains, and which
/// signature each audience and kind allows.
@Suite struct OfferRulesTests {
    static let product = CatalogueProduct(
        productID: "pro.month", subscriptionGroupID: "g", planCode: "pro", planLevel: 1, duration: .month, creditsAmount: 1,
        offers: [
            CatalogueOffer(offerIdentifier: "any", audience: .anyone), CatalogueOffer(offerIdentifier: "keep", audience: .subscribed),
            CatalogueOffer(offerIdentifier: "back", audience: .lapsed), CatalogueOffer(offerIdentifier: "new", audience: .newToGroup),
        ],
        introductoryOffer: true)

    @Test func standingFollowsTheChainsOfTheGroup() {
        #expect(GroupStanding(statuses: []) == .never)
        #expect(GroupStanding(statuses: [.expired, .revoked]) == .lapsed)
        #expect(GroupStanding(statuses: [.expired, .active]) == .subscribed)
        #expect(GroupStanding(statuses: [.grace]) == .subscribed)
        // Apple is still trying to collect: not a lapsed subscriber yet.
        #expect(GroupStanding(statuses: [.billingRetry, .expired]) == .subscribed)
    }

    /// Each promotional offer against each standing: signed exactly where its audience matches.
    @Test(arguments: [GroupStanding.never, .subscribed, .lapsed])
    func promotionalOffersGoToTheirAudience(standing: GroupStanding) {
        let allowed: [GroupStanding: Set<String>] = [
            .never: ["any", "new"], .subscribed: ["any", "keep"], .lapsed: ["any", "back"],
        ]
        for offer in Self.product.offers {
            let decision = OfferRules.decide(product: Self.product, kind: .promotional, offerIdentifier: offer.offerIdentifier, standing: standing)
            if allowed[standing]!.contains(offer.offerIdentifier) {
                #expect(decision == .promotional(offerIdentifier: offer.offerIdentifier))
            } else {
                #expect(decision == .notEligible(audience: offer.audience, standing: standing))
            }
        }
    }

    @Test func introductoryEligibilityIsTrueOnlyForUsersNewToTheGroup() {
        #expect(
            OfferRules.decide(product: Self.product, kind: .introductoryEligibility, offerIdentifier: nil, standing: .never)
                == .introductory(allowed: true))
        for standing in [GroupStanding.lapsed, .subscribed] {
            #expect(
                OfferRules.decide(product: Self.product, kind: .introductoryEligibility, offerIdentifier: nil, standing: standing)
                    == .introductory(allowed: false))
        }
        var without = Self.product
        without.introductoryOffer = false
        #expect(OfferRules.decide(product: without, kind: .introductoryEligibility, offerIdentifier: nil, standing: .never) == .unknownOffer)
    }

    @Test func unknownOrDisabledProductsAndOffersAreRefused() {
        #expect(OfferRules.decide(product: nil, kind: .promotional, offerIdentifier: "any", standing: .never) == .unknownProduct)
        var disabled = Self.product
        disabled.enabled = false
        #expect(OfferRules.decide(product: disabled, kind: .promotional, offerIdentifier: "any", standing: .never) == .unknownProduct)
        let pack = CatalogueProduct.consumable(productID: "pack", planCode: "pack", permanentCredits: 10)
        #expect(OfferRules.decide(product: pack, kind: .promotional, offerIdentifier: "any", standing: .never) == .unknownProduct)
        #expect(OfferRules.decide(product: Self.product, kind: .promotional, offerIdentifier: "other", standing: .never) == .unknownOffer)
        #expect(OfferRules.decide(product: Self.product, kind: .promotional, offerIdentifier: nil, standing: .never) == .unknownOffer)
    }
}
