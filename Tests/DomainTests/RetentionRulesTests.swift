import Domain
import Testing

/// The catalogue's retention rules: the first rule fitting the locale, offers only for the
/// audience they name, and nothing personal for a user whose consent was rescinded.
@Suite struct RetentionRulesTests {
    static let german = "2f9c3a1e-0000-4000-8000-000000000001"
    static let anyLocale = "2f9c3a1e-0000-4000-8000-000000000002"
    static let withOffer = "2f9c3a1e-0000-4000-8000-000000000003"
    static let product = CatalogueProduct(
        productID: "pro.month", subscriptionGroupID: "g", planCode: "pro", planLevel: 1, duration: .month, creditsAmount: 1,
        offers: [CatalogueOffer(offerIdentifier: "keep", audience: .subscribed)],
        retentionMessages: [
            RetentionRule(messageIdentifier: german, locales: ["de"]),
            RetentionRule(messageIdentifier: withOffer, locales: ["en-GB"], offerIdentifier: "keep"),
            RetentionRule(messageIdentifier: anyLocale),
        ])

    func answer(_ locale: String, _ subject: RetentionSubject, canSign: Bool = true, product: CatalogueProduct? = product)
        -> RetentionAnswer
    {
        RetentionRules.answer(product: product, userLocale: locale, subject: subject, canSignOffers: canSign)
    }

    @Test func theFirstRuleCoveringTheLocaleOrItsLanguageWins() {
        #expect(answer("de-AT", .unknown) == .message(messageIdentifier: Self.german))
        #expect(answer("DE_de", .unknown) == .message(messageIdentifier: Self.german))
        #expect(answer("fr-FR", .known(standing: .subscribed)) == .message(messageIdentifier: Self.anyLocale))
    }

    @Test func anOfferIsChosenOnlyWhenItsAudienceAdmitsTheSubscriberAndItCanBeSigned() {
        #expect(
            answer("en-GB", .known(standing: .subscribed))
                == .promotionalOffer(messageIdentifier: Self.withOffer, offerIdentifier: "keep"))
        #expect(answer("en-GB", .known(standing: .lapsed)) == .message(messageIdentifier: Self.anyLocale))
        #expect(answer("en-GB", .unknown) == .message(messageIdentifier: Self.anyLocale))
        #expect(answer("en-GB", .known(standing: .subscribed), canSign: false) == .message(messageIdentifier: Self.anyLocale))
    }

    @Test func rescindedConsentUnknownProductsAndNoFittingRuleGetTheDefault() {
        #expect(answer("de-DE", .consentRescinded) == RetentionAnswer.none)
        #expect(answer("de-DE", .unknown, product: nil) == RetentionAnswer.none)
        var germanOnly = Self.product
        germanOnly.retentionMessages = [RetentionRule(messageIdentifier: Self.german, locales: ["de"])]
        #expect(answer("en-US", .known(standing: .subscribed), product: germanOnly) == RetentionAnswer.none)
        #expect(RetentionAnswer.none.kind == "DEFAULT")
    }

    static let switchPlan = "2f9c3a1e-0000-4000-8000-000000000004"
    /// The monthly plan suggests the yearly one first, then falls back to a plain message.
    static let suggesting = CatalogueProduct(
        productID: "pro.month", subscriptionGroupID: "g", planCode: "pro", planLevel: 1, duration: .month, creditsAmount: 1,
        retentionMessages: [
            RetentionRule(messageIdentifier: switchPlan, alternateProductId: "pro.year"),
            RetentionRule(messageIdentifier: anyLocale),
        ])

    @Test func anAlternateProductIsSuggestedUnlessTheSubscriberIsAlreadyOnIt() {
        let suggested = RetentionAnswer.alternateProduct(messageIdentifier: Self.switchPlan, productId: "pro.year")
        #expect(answer("en-US", .unknown, product: Self.suggesting) == suggested)
        #expect(answer("en-US", .known(standing: .subscribed, heldProducts: ["pro.month"]), product: Self.suggesting) == suggested)
        #expect(suggested.kind == "ALTERNATE_PRODUCT")
        // A second chain already on the yearly plan, or a change to it pending: the next rule.
        #expect(
            answer("en-US", .known(standing: .subscribed, heldProducts: ["pro.month", "pro.year"]), product: Self.suggesting)
                == .message(messageIdentifier: Self.anyLocale))
        #expect(answer("en-US", .consentRescinded, product: Self.suggesting) == RetentionAnswer.none)
    }

    @Test func aSubscriberHoldsTheProductsOfChainsInServiceOrRetryAndWhatTheyRenewInto() {
        let subject = RetentionSubject.known(chains: [
            (productId: "pro.month", renewsInto: "pro.year", status: .active),
            (productId: "basic.month", renewsInto: nil, status: .expired),
            (productId: "pro.week", renewsInto: nil, status: .billingRetry),
        ])
        #expect(subject == .known(standing: .subscribed, heldProducts: ["pro.month", "pro.year", "pro.week"]))
        // Only ended chains: lapsed, holding nothing, so a switch back may be suggested.
        let lapsed = RetentionSubject.known(chains: [(productId: "pro.year", renewsInto: nil, status: .expired)])
        #expect(lapsed == .known(standing: .lapsed, heldProducts: []))
        #expect(
            answer("en-US", lapsed, product: Self.suggesting)
                == .alternateProduct(messageIdentifier: Self.switchPlan, productId: "pro.year"))
    }

    @Test func readinessListsEachRuleMessageWithApplesStateAndOnlyApprovedOnesAreReady() {
        var other = Self.suggesting
        other.productID = "pro.year"
        other.retentionMessages = [RetentionRule(messageIdentifier: Self.german), RetentionRule(messageIdentifier: Self.german)]
        let readiness = RetentionRules.readiness(
            of: [Self.suggesting, other], states: [Self.switchPlan.uppercased(): "APPROVED", Self.anyLocale: "PENDING"])
        #expect(
            readiness == [
                RetentionMessageReadiness(productId: "pro.month", messageIdentifier: Self.switchPlan, messageState: "APPROVED"),
                RetentionMessageReadiness(productId: "pro.month", messageIdentifier: Self.anyLocale, messageState: "PENDING"),
                RetentionMessageReadiness(productId: "pro.year", messageIdentifier: Self.german, messageState: nil),
            ])
        #expect(readiness.map(\.isReady) == [true, false, false])
    }
}
