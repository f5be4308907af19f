import Foundation

/// One rule of a product's retention messages (Apple's Retention Messaging API): the message
/// set up in App Store Connect to show a subscriber about to cancel, for some locales, and
/// optionally a promotional offer of the product to present with it.
public struct RetentionRule: Sendable, Hashable, Codable {
    /// Apple's message identifier (a UUID, lowercase), approved in App Store Connect.
    public var messageIdentifier: String
    /// Nil: any locale. Otherwise the user locales (`en-US`) or languages (`en`) it is for.
    public var locales: [String]?
    /// One of the product's `offers`: the answer is then a promotional offer, signed for the
    /// subscriber, when the offer's audience admits them.
    public var offerIdentifier: String?

    public init(messageIdentifier: String, locales: [String]? = nil, offerIdentifier: String? = nil) {
        self.messageIdentifier = messageIdentifier
        self.locales = locales
        self.offerIdentifier = offerIdentifier
    }

    /// Whether the rule is for `userLocale`: listed exactly (case aside), or by its language.
    public func covers(userLocale: String) -> Bool {
        guard let locales else { return true }
        let wanted = userLocale.lowercased().replacingOccurrences(of: "_", with: "-")
        let language = wanted.split(separator: "-").first.map(String.init) ?? wanted
        return locales.contains { $0.lowercased() == wanted || $0.lowercased() == language }
    }
}

/// What we answer Apple's Get Retention Message request with.
public enum RetentionAnswer: Sendable, Hashable {
    /// A text message (with or without image): Apple's `message`.
    case message(messageIdentifier: String)
    /// A message with a promotional offer: Apple's `promotionalOffer`, its signature made for
    /// the request's transaction.
    case promotionalOffer(messageIdentifier: String, offerIdentifier: String)
    /// No choice: Apple shows the default message configured in App Store Connect.
    case none

    /// The recorded name of the answer's kind.
    public var kind: String {
        switch self {
        case .message: "MESSAGE"
        case .promotionalOffer: "PROMOTIONAL_OFFER"
        case .none: "DEFAULT"
        }
    }
}

/// Who asks, as far as the rules may look: nothing personal is read for a user whose consent was
/// rescinded.
public enum RetentionSubject: Sendable, Hashable {
    /// A chain of ours; `standing` is the user's in the product's group.
    case known(standing: GroupStanding)
    /// A chain we do not know (or know of no user).
    case unknown
    /// A user whose parent withdrew consent (RESCIND_CONSENT): no personalised choice.
    case consentRescinded
}

/// The catalogue's retention rules: pure, so the route and the tests share one decision.
public enum RetentionRules {
    /// The first of `product`'s rules that covers `userLocale` and, when it names an offer, whose
    /// offer exists, admits `subject` and can be signed (`canSignOffers`). A rescinded user, a
    /// product we do not sell, or no fitting rule get `.none` (Apple's default message).
    public static func answer(
        product: CatalogueProduct?, userLocale: String, subject: RetentionSubject, canSignOffers: Bool
    ) -> RetentionAnswer {
        guard let product, product.kind == .autoRenewable, subject != .consentRescinded else { return .none }
        for rule in product.retentionMessages where rule.covers(userLocale: userLocale) {
            guard let offerIdentifier = rule.offerIdentifier else { return .message(messageIdentifier: rule.messageIdentifier) }
            // An offer is only for a subscriber whose standing its audience admits; an unknown
            // chain has no standing to judge, so it gets the next rule.
            guard canSignOffers, case .known(let standing) = subject,
                let offer = product.offers.first(where: { $0.offerIdentifier == offerIdentifier }),
                OfferRules.matches(offer.audience, standing)
            else { continue }
            return .promotionalOffer(messageIdentifier: rule.messageIdentifier, offerIdentifier: offerIdentifier)
        }
        return .none
    }
}
