import Foundation

/// One rule of a product's retention messages (Apple's Retention Messaging API): the message
/// set up in App Store Connect to show a subscriber about to cancel, for some locales, and
/// optionally a promotional offer of the product to present with it, or another product of the
/// group to suggest switching to.
public struct RetentionRule: Sendable, Hashable, Codable {
    /// Apple's message identifier (a UUID, lowercase), approved in App Store Connect.
    public var messageIdentifier: String
    /// Nil: any locale. Otherwise the user locales (`en-US`) or languages (`en`) it is for.
    public var locales: [String]?
    /// One of the product's `offers`: the answer is then a promotional offer, signed for the
    /// subscriber, when the offer's audience admits them.
    public var offerIdentifier: String?
    /// Another product of the same subscription group: the answer is then a switch-plan message
    /// (Apple's `alternateProduct`), for a subscriber not already on that product.
    public var alternateProductId: String?

    public init(
        messageIdentifier: String, locales: [String]? = nil, offerIdentifier: String? = nil, alternateProductId: String? = nil
    ) {
        self.messageIdentifier = messageIdentifier
        self.locales = locales
        self.offerIdentifier = offerIdentifier
        self.alternateProductId = alternateProductId
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
    /// A switch-plan message suggesting another product of the group: Apple's `alternateProduct`.
    case alternateProduct(messageIdentifier: String, productId: String)
    /// No choice: Apple shows the default message configured in App Store Connect.
    case none

    /// The recorded name of the answer's kind.
    public var kind: String {
        switch self {
        case .message: "MESSAGE"
        case .promotionalOffer: "PROMOTIONAL_OFFER"
        case .alternateProduct: "ALTERNATE_PRODUCT"
        case .none: "DEFAULT"
        }
    }
}

/// Who asks, as far as the rules may look: nothing personal is read for a user whose consent was
/// rescinded.
public enum RetentionSubject: Sendable, Hashable {
    /// A chain of ours; `standing` is the user's in the product's group, `heldProducts` the
    /// products their chains of the group are on or renew into (in service or billing retry).
    case known(standing: GroupStanding, heldProducts: Set<String> = [])
    /// A chain we do not know (or know of no user).
    case unknown
    /// A user whose parent withdrew consent (RESCIND_CONSENT): no personalised choice.
    case consentRescinded

    /// A user of ours given their chains of the product's group: each chain's product, the product
    /// it renews into (a pending change), and its status at the moment asked. Only a chain in
    /// service or in billing retry holds its products; an ended one holds nothing to switch from.
    public static func known(chains: [(productId: String, renewsInto: String?, status: SubscriptionStatus)]) -> RetentionSubject {
        let held = chains.filter { $0.status.hasService || $0.status == .billingRetry }.flatMap {
            [$0.productId] + ($0.renewsInto.map { [$0] } ?? [])
        }
        return .known(standing: GroupStanding(statuses: chains.map(\.status)), heldProducts: Set(held))
    }
}

/// The catalogue's retention rules: pure, so the route and the tests share one decision.
public enum RetentionRules {
    /// The first of `product`'s rules that covers `userLocale` and, when it names an offer, whose
    /// offer exists, admits `subject` and can be signed (`canSignOffers`); when it names an
    /// alternate product, one the subscriber is not already on. A rescinded user, a product we do
    /// not sell, or no fitting rule get `.none` (Apple's default message).
    public static func answer(
        product: CatalogueProduct?, userLocale: String, subject: RetentionSubject, canSignOffers: Bool
    ) -> RetentionAnswer {
        guard let product, product.kind == .autoRenewable, subject != .consentRescinded else { return .none }
        for rule in product.retentionMessages where rule.covers(userLocale: userLocale) {
            if let alternate = rule.alternateProductId {
                // Suggesting the plan the subscriber already has (or already switches to) would
                // offer nothing; a chain we do not know is on the request's product only.
                guard alternate != product.productID else { continue }
                if case .known(_, let held) = subject, held.contains(alternate) { continue }
                return .alternateProduct(messageIdentifier: rule.messageIdentifier, productId: alternate)
            }
            guard let offerIdentifier = rule.offerIdentifier else { return .message(messageIdentifier: rule.messageIdentifier) }
            // An offer is only for a subscriber whose standing its audience admits; an unknown
            // chain has no standing to judge, so it gets the next rule.
            guard canSignOffers, case .known(let standing, _) = subject,
                let offer = product.offers.first(where: { $0.offerIdentifier == offerIdentifier }),
                OfferRules.matches(offer.audience, standing)
            else { continue }
            return .promotionalOffer(messageIdentifier: rule.messageIdentifier, offerIdentifier: offerIdentifier)
        }
        return .none
    }
}

/// A message a catalogue rule names, as Apple holds it: Apple shows only an approved message, and
/// shows its default in place of one it does not have or has not approved.
public struct RetentionMessageReadiness: Sendable, Hashable, Codable {
    public var productId: String
    public var messageIdentifier: String
    /// Apple's `messageState` (`PENDING`, `APPROVED`, `REJECTED`); nil when Apple does not have it.
    public var messageState: String?

    public init(productId: String, messageIdentifier: String, messageState: String?) {
        self.productId = productId
        self.messageIdentifier = messageIdentifier
        self.messageState = messageState
    }

    /// Whether Apple would show it.
    public var isReady: Bool { messageState == "APPROVED" }
}

extension RetentionRules {
    /// Each message the products' rules name (once per product, in rule order) with its state
    /// among `states` (Apple's message list, by identifier in any case).
    public static func readiness(of products: [CatalogueProduct], states: [String: String]) -> [RetentionMessageReadiness] {
        let byIdentifier = Dictionary(states.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        return products.flatMap { product in
            var seen: Set<String> = []
            return product.retentionMessages.map { $0.messageIdentifier.lowercased() }.filter { seen.insert($0).inserted }.map {
                RetentionMessageReadiness(productId: product.productID, messageIdentifier: $0, messageState: byIdentifier[$0])
            }
        }
    }
}
