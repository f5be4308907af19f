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
}
