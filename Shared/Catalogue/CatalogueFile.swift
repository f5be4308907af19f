import Domain
import Foundation

/// A catalogue file: every product of one app on one channel, with its per-product rules.
///
/// The format is documented in `README.md` next to this file. Parsing is strict on purpose: an
/// unknown key is refused rather than ignored, because a misspelt rule (`"creditAmount"`) would
/// otherwise silently fall back to its default and grant the wrong credits.
public struct CatalogueFile: Sendable, Equatable {
    /// The payment channel; only Apple's exists today.
    public var channel: String
    /// The app the products belong to: its bundle id (`APPLE_IAP_BUNDLE_ID` of the services).
    public var appKey: String
    public var products: [CatalogueProduct]

    public init(channel: String = CatalogueFile.appleChannel, appKey: String, products: [CatalogueProduct]) {
        self.channel = channel
        self.appKey = appKey
        self.products = products
    }

    public static let appleChannel = "APPLE"

    /// Reads and validates a catalogue file from disk.
    public static func load(path: String) throws(CatalogueFileError) -> CatalogueFile {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw CatalogueFileError(problems: ["cannot read \(path)"])
        }
        return try parse(data)
    }

    /// Parses and validates catalogue JSON; the error lists every problem found.
    public static func parse(_ data: Data) throws(CatalogueFileError) -> CatalogueFile {
        // Types are checked by JSONDecoder (which tells a boolean from a number); key names by a
        // second, untyped read, since JSONDecoder ignores keys it does not know.
        let raw: RawFile
        do {
            raw = try JSONDecoder().decode(RawFile.self, from: data)
        } catch {
            throw CatalogueFileError(problems: [describe(error)])
        }
        var problems: [String] = []
        if let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] {
            problems += unknownKeys(of: object, allowed: RawFile.CodingKeys.allCases.map(\.rawValue), at: "")
            for (index, product) in ((object["products"] as? [Any]) ?? []).enumerated() {
                guard let product = product as? [String: Any] else { continue }
                problems += unknownKeys(of: product, allowed: RawProduct.CodingKeys.allCases.map(\.rawValue), at: "products[\(index)].")
                for (position, offer) in ((product["offers"] as? [Any]) ?? []).enumerated() {
                    guard let offer = offer as? [String: Any] else { continue }
                    problems += unknownKeys(
                        of: offer, allowed: RawOffer.CodingKeys.allCases.map(\.rawValue), at: "products[\(index)].offers[\(position)].")
                }
                for (position, rule) in ((product["retentionMessages"] as? [Any]) ?? []).enumerated() {
                    guard let rule = rule as? [String: Any] else { continue }
                    problems += unknownKeys(
                        of: rule, allowed: RawRetentionMessage.CodingKeys.allCases.map(\.rawValue),
                        at: "products[\(index)].retentionMessages[\(position)].")
                }
            }
        }
        let channel = raw.channel ?? appleChannel
        if channel != appleChannel { problems.append("channel must be \(appleChannel)") }
        if !isIdentifier(raw.appKey) { problems.append("appKey must be a bundle id (1 to 255 characters, no spaces)") }
        if raw.products.isEmpty { problems.append("products must list at least one product") }
        var seen: Set<String> = []
        var products: [CatalogueProduct] = []
        for (index, product) in raw.products.enumerated() {
            let at = "products[\(index)]"
            if !isIdentifier(product.productId) { problems.append("\(at).productId must be 1 to 255 characters, no spaces") }
            if !seen.insert(product.productId).inserted { problems.append("\(at).productId \(product.productId) is listed twice") }
            if !isIdentifier(product.planCode) { problems.append("\(at).planCode must be 1 to 255 characters, no spaces") }
            if product.kind == .consumable {
                // A credit pack: its PERMANENT credits, and none of a subscription's fields.
                let subscriptionFields: [(String, Bool)] = [
                    ("subscriptionGroupId", product.subscriptionGroupId != nil), ("planLevel", product.planLevel != nil),
                    ("duration", product.duration != nil), ("creditsAmount", product.creditsAmount != nil),
                    ("trialGrantsCredits", product.trialGrantsCredits != nil), ("upgradeGrant", product.upgradeGrant != nil),
                    ("familySharedGrantsCredits", product.familySharedGrantsCredits != nil),
                    ("freePeriodGrantsCredits", product.freePeriodGrantsCredits != nil),
                    ("billingRetrySpendsCredits", product.billingRetrySpendsCredits != nil),
                    ("entitlements", product.entitlements != nil), ("offers", product.offers != nil),
                    ("introductoryOffer", product.introductoryOffer != nil),
                    ("billingPlanType", product.billingPlanType != nil),
                    ("retentionMessages", product.retentionMessages != nil),
                ]
                for (name, present) in subscriptionFields where present {
                    problems.append("\(at).\(name) is a subscription field; a CONSUMABLE has permanentCredits only")
                }
                guard let credits = product.permanentCredits, (1...maxCreditsAmount).contains(credits) else {
                    problems.append("\(at).permanentCredits must be from 1 to \(maxCreditsAmount) whole credits for a CONSUMABLE")
                    continue
                }
                products.append(
                    .consumable(
                        productID: product.productId, planCode: product.planCode, permanentCredits: credits,
                        enabled: product.enabled ?? true, refundPreference: product.refundPreference))
                continue
            }
            if product.permanentCredits != nil {
                problems.append("\(at).permanentCredits is for a CONSUMABLE only (kind)")
            }
            for (name, missing) in [
                ("subscriptionGroupId", product.subscriptionGroupId == nil), ("planLevel", product.planLevel == nil),
                ("duration", product.duration == nil), ("creditsAmount", product.creditsAmount == nil),
            ] where missing {
                problems.append("\(at).\(name) is required")
            }
            guard let group = product.subscriptionGroupId, let level = product.planLevel, let duration = product.duration,
                let creditsAmount = product.creditsAmount
            else { continue }
            if !isIdentifier(group) {
                problems.append("\(at).subscriptionGroupId must be 1 to 255 characters, no spaces")
            }
            if !(1...1000).contains(level) { problems.append("\(at).planLevel must be from 1 (highest) to 1000") }
            if !(0...maxCreditsAmount).contains(creditsAmount) {
                problems.append("\(at).creditsAmount must be from 0 to \(maxCreditsAmount) whole credits")
            }
            if let entitlements = product.entitlements {
                if entitlements.isEmpty { problems.append("\(at).entitlements must name at least one entitlement (or be left out: [planCode])") }
                for (position, entitlement) in entitlements.enumerated() where !Entitlements.isIdentifier(entitlement) {
                    problems.append("\(at).entitlements[\(position)] \"\(entitlement)\" is not an entitlement identifier ([a-z0-9_.-], 1 to 64)")
                }
                if Set(entitlements).count != entitlements.count { problems.append("\(at).entitlements lists an entitlement twice") }
            }
            let billingPlan = product.billingPlanType ?? .billedUpfront
            if billingPlan == .monthly, duration != .year {
                problems.append("\(at).billingPlanType MONTHLY is a 12-month commitment billed monthly: the duration must be P1Y")
            }
            var offerIdentifiers: Set<String> = []
            for (position, offer) in (product.offers ?? []).enumerated() {
                if !isIdentifier(offer.offerIdentifier) {
                    problems.append("\(at).offers[\(position)].offerIdentifier must be 1 to 255 characters, no spaces")
                }
                if !offerIdentifiers.insert(offer.offerIdentifier).inserted {
                    problems.append("\(at).offers[\(position)].offerIdentifier \(offer.offerIdentifier) is listed twice")
                }
            }
            problems += retentionProblems(product.retentionMessages ?? [], offers: offerIdentifiers, at: at)
            var freePeriods: [OfferKind: Bool] = [:]
            for (name, grants) in (product.freePeriodGrantsCredits ?? [:]).sorted(by: { $0.key < $1.key }) {
                guard let kind = OfferKind.allCases.first(where: { $0.catalogueName == name }), kind != .introductory else {
                    problems.append(
                        "\(at).freePeriodGrantsCredits.\(name) is not an offer kind (PROMOTIONAL, OFFER_CODE, WIN_BACK; "
                            + "introductory free trials follow trialGrantsCredits)")
                    continue
                }
                freePeriods[kind] = grants
            }
            products.append(
                CatalogueProduct(
                    productID: product.productId, subscriptionGroupID: group, planCode: product.planCode, planLevel: level,
                    duration: duration, creditsAmount: creditsAmount, enabled: product.enabled ?? true,
                    trialGrantsCredits: product.trialGrantsCredits ?? true, upgradeGrant: product.upgradeGrant ?? .full,
                    familySharedGrantsCredits: product.familySharedGrantsCredits ?? false, freePeriodGrantsCredits: freePeriods,
                    billingRetrySpendsCredits: product.billingRetrySpendsCredits ?? false, refundPreference: product.refundPreference,
                    entitlements: product.entitlements,
                    offers: (product.offers ?? []).map { CatalogueOffer(offerIdentifier: $0.offerIdentifier, audience: $0.audience) },
                    introductoryOffer: product.introductoryOffer ?? false, billingPlan: billingPlan,
                    retentionMessages: (product.retentionMessages ?? []).map {
                        RetentionRule(
                            messageIdentifier: $0.messageIdentifier.lowercased(), locales: $0.locales, offerIdentifier: $0.offerIdentifier,
                            alternateProductId: $0.alternateProductId)
                    }))
        }
        problems += alternateProductProblems(raw.products)
        guard problems.isEmpty else { throw CatalogueFileError(problems: problems) }
        return CatalogueFile(channel: channel, appKey: raw.appKey, products: products)
    }

    /// Credits are stored as micro-credits in a bigint: this bound keeps every amount convertible.
    public static let maxCreditsAmount: Int64 = 1_000_000_000_000

    private struct RawFile: Decodable {
        enum CodingKeys: String, CodingKey, CaseIterable { case channel, appKey, products }
        let channel: String?
        let appKey: String
        let products: [RawProduct]
    }

    private struct RawProduct: Decodable {
        enum CodingKeys: String, CodingKey, CaseIterable {
            case productId, kind, subscriptionGroupId, planCode, planLevel, duration, creditsAmount, permanentCredits, enabled
            case trialGrantsCredits, upgradeGrant, familySharedGrantsCredits, freePeriodGrantsCredits, billingRetrySpendsCredits
            case refundPreference, entitlements, offers, introductoryOffer, billingPlanType, retentionMessages
        }
        let productId: String
        /// Nil: AUTO_RENEWABLE.
        let kind: ProductKind?
        let subscriptionGroupId: String?
        let planCode: String
        let planLevel: Int?
        let duration: ProductDuration?
        let creditsAmount: Int64?
        let permanentCredits: Int64?
        let enabled: Bool?
        let trialGrantsCredits: Bool?
        let upgradeGrant: UpgradeGrant?
        let familySharedGrantsCredits: Bool?
        let freePeriodGrantsCredits: [String: Bool]?
        let billingRetrySpendsCredits: Bool?
        let refundPreference: RefundPreference?
        /// Nil: the plan code.
        let entitlements: [String]?
        /// Nil: none.
        let offers: [RawOffer]?
        /// Nil: false.
        let introductoryOffer: Bool?
        /// Nil: BILLED_UPFRONT.
        let billingPlanType: BillingPlan?
        /// Nil: none (Apple shows its default message).
        let retentionMessages: [RawRetentionMessage]?
    }

    private struct RawRetentionMessage: Decodable {
        enum CodingKeys: String, CodingKey, CaseIterable { case messageIdentifier, locales, offerIdentifier, alternateProductId }
        let messageIdentifier: String
        let locales: [String]?
        let offerIdentifier: String?
        let alternateProductId: String?
    }

    /// A switch-plan rule names another enabled subscription of the same group in this file: Apple
    /// only switches inside a group, a product the file does not describe cannot be checked, and
    /// since a file is applied whole the product stays as checked while the rule does.
    private static func alternateProductProblems(_ products: [RawProduct]) -> [String] {
        let byID = Dictionary(products.map { ($0.productId, $0) }, uniquingKeysWith: { first, _ in first })
        var problems: [String] = []
        for (index, product) in products.enumerated() {
            for (position, rule) in (product.retentionMessages ?? []).enumerated() {
                guard let alternate = rule.alternateProductId else { continue }
                let here = "products[\(index)].retentionMessages[\(position)].alternateProductId \(alternate)"
                if rule.offerIdentifier != nil {
                    problems.append(
                        "products[\(index)].retentionMessages[\(position)] names both an offerIdentifier and an alternateProductId;"
                            + " Apple's answer is one or the other")
                }
                guard let target = byID[alternate] else {
                    problems.append("\(here) is not a product of this catalogue")
                    continue
                }
                if alternate == product.productId {
                    problems.append("\(here) is the product itself; name another product of its subscription group")
                } else if target.kind == .consumable || target.subscriptionGroupId != product.subscriptionGroupId {
                    problems.append(
                        "\(here) is not in the subscription group \(product.subscriptionGroupId ?? "-"); Apple switches only within a group")
                }
                if target.enabled == false {
                    problems.append("\(here) is disabled; a product that is not offered cannot be suggested")
                }
            }
        }
        return problems
    }

    /// A rule's message is Apple's UUID, its locales BCP 47-like tags (`en`, `en-US`), its offer
    /// one of the product's: Apple fails a message it does not know, and shows its default.
    private static func retentionProblems(_ rules: [RawRetentionMessage], offers: Set<String>, at: String) -> [String] {
        var problems: [String] = []
        for (position, rule) in rules.enumerated() {
            let here = "\(at).retentionMessages[\(position)]"
            if UUID(uuidString: rule.messageIdentifier) == nil {
                problems.append("\(here).messageIdentifier must be the message's UUID from App Store Connect")
            }
            if let locales = rule.locales {
                if locales.isEmpty { problems.append("\(here).locales must name at least one locale (or be left out: any)") }
                for (index, locale) in locales.enumerated() where locale.wholeMatch(of: /[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*/) == nil {
                    problems.append("\(here).locales[\(index)] \"\(locale)\" is not a locale (en, en-US)")
                }
            }
            if let offer = rule.offerIdentifier, !offers.contains(offer) {
                problems.append("\(here).offerIdentifier \(offer) is not one of the product's offers")
            }
        }
        return problems
    }

    private struct RawOffer: Decodable {
        enum CodingKeys: String, CodingKey, CaseIterable { case offerIdentifier, audience }
        let offerIdentifier: String
        let audience: OfferAudience
    }

    private static func unknownKeys(of object: [String: Any], allowed: [String], at prefix: String) -> [String] {
        object.keys.filter { !allowed.contains($0) }.sorted().map { "\(prefix)\($0) is not a catalogue field" }
    }

    private static func isIdentifier(_ value: String) -> Bool {
        (1...255).contains(value.utf8.count) && !value.unicodeScalars.contains { $0.properties.isWhitespace || $0.value < 0x20 }
    }

    private static func describe(_ error: any Error) -> String {
        func path(_ context: DecodingError.Context, _ last: (any CodingKey)? = nil) -> String {
            let keys = context.codingPath + (last.map { [$0] } ?? [])
            let joined = keys.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
            return String(joined.drop(while: { $0 == "." }))
        }
        switch error as? DecodingError {
        case .keyNotFound(let key, let context)?: return "\(path(context, key)) is required"
        case .valueNotFound(_, let context)?: return "\(path(context)) must not be null"
        case .typeMismatch(_, let context)?: return "\(path(context)) has the wrong type"
        case .dataCorrupted(let context)? where !context.codingPath.isEmpty:
            return
                "\(path(context)) has an invalid value (duration: P1W|P1M|P2M|P3M|P6M|P1Y, upgradeGrant: FULL|DIFFERENCE, refundPreference: DECLINE|GRANT_FULL|GRANT_PRORATED, kind: AUTO_RENEWABLE|CONSUMABLE, audience: ANYONE|SUBSCRIBED|LAPSED|NEW_TO_GROUP, billingPlanType: BILLED_UPFRONT|MONTHLY)"
        default: return "the file is not a JSON object"
        }
    }
}

/// Why a catalogue file was refused: one line per problem.
public struct CatalogueFileError: Error, Sendable, CustomStringConvertible {
    public let problems: [String]
    public var description: String { problems.joined(separator: "\n") }
}
